/**
 * Where an `oauth` upstream's grants come from (docs/security.md, "Upstream credentials"): the
 * authorization server, the resource the tokens are for (RFC 8707) and the scopes to ask. Found as
 * the MCP authorization rules describe: the upstream's 401 `WWW-Authenticate` names its protected
 * resource metadata (`resource_metadata`, RFC 9728; else its well-known URL), whose
 * `authorization_servers[0]` is the issuer; its metadata is read from RFC 8414's well-known URL,
 * else OpenID discovery's. `credentials.authorizationServer` and `credentials.resource` skip what
 * they answer. Results are kept per upstream; a failure is not.
 */
import * as oauth from 'oauth4webapi';
import type { GatewayConfig } from '../config/schema.js';
import type { UpstreamCredentialsConfig } from '../config/credentials-schema.js';
import { authorizationFailed, describeFailure, isLoopbackHost, OAUTH_TIMEOUT_MS, requestOptions } from './oauth-http.js';

/** An `oauth` upstream's credentials config. */
export type OAuthConfig = Extract<UpstreamCredentialsConfig, { mode: 'oauth' }>;

/** What the consent and the token requests of one upstream use. */
export interface AuthorizationTarget {
  /** The authorization server's metadata (RFC 8414). */
  as: oauth.AuthorizationServer;
  /** The resource the tokens are asked for (RFC 8707 `resource`). */
  resource: string;
  /** Scopes asked (may be empty). */
  scopes: string[];
}

/** The `oauth` credentials of `upstream` in `cfg`. @throws GatewayError -32603 upstream-authorization when it has none. */
export function oauthConfigOf(cfg: Pick<GatewayConfig, 'upstreams'>, upstream: string): OAuthConfig {
  const c = cfg.upstreams[upstream]?.credentials;
  if (c?.mode !== 'oauth') throw authorizationFailed(upstream, `Upstream ${upstream} does not use per-user OAuth grants`);
  return c;
}

/** Finds and keeps each `oauth` upstream's {@link AuthorizationTarget}. */
export class OAuthDiscovery {
  private readonly found = new Map<string, Promise<AuthorizationTarget>>();

  constructor(private readonly cfg: Pick<GatewayConfig, 'upstreams'>) {}

  /**
   * The target of `upstream`, discovered once (concurrent callers share the discovery; a failed one
   * is tried again next time).
   * @throws GatewayError -32603 upstream-authorization naming what could not be found or reached.
   */
  target(upstream: string): Promise<AuthorizationTarget> {
    let t = this.found.get(upstream);
    if (!t) {
      t = this.discover(upstream);
      this.found.set(upstream, t);
      t.catch(() => this.found.delete(upstream));
    }
    return t;
  }

  private async discover(upstream: string): Promise<AuthorizationTarget> {
    const c = oauthConfigOf(this.cfg, upstream);
    const url = (this.cfg.upstreams[upstream] as { url?: string }).url;
    let resource = c.resource ?? url;
    let issuer = c.authorizationServer;
    let scopes = c.scopes;
    if (!issuer) {
      if (!url)
        throw authorizationFailed(
          upstream,
          `Upstream ${upstream} has no URL to discover its authorization server from: set credentials.authorizationServer`,
        );
      const prm = await this.resourceMetadata(upstream, url, resource!);
      issuer = prm.authorization_servers?.[0];
      if (!issuer)
        throw authorizationFailed(
          upstream,
          `The protected resource metadata of upstream ${upstream} names no authorization server: set credentials.authorizationServer`,
        );
      resource = c.resource ?? prm.resource;
      scopes ??= prm.scopes_supported;
    }
    if (!resource) throw authorizationFailed(upstream, `Upstream ${upstream} needs credentials.resource`);
    return { as: await this.serverMetadata(upstream, issuer), resource, scopes: scopes ?? [] };
  }

  /** RFC 9728 metadata: from the 401's `resource_metadata`, else the resource's well-known URL. */
  private async resourceMetadata(upstream: string, url: string, resource: string): Promise<oauth.ResourceServer> {
    let metadataUrl: string | undefined;
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'ping' }),
        signal: AbortSignal.timeout(OAUTH_TIMEOUT_MS),
        redirect: 'manual',
      });
      await res.body?.cancel();
      const challenge = res.status === 401 ? res.headers.get('www-authenticate') : null;
      metadataUrl = challenge ? /resource_metadata="([^"]+)"/i.exec(challenge)?.[1] : undefined;
    } catch (e) {
      throw authorizationFailed(upstream, describeFailure(`Upstream ${upstream} (${url})`, e));
    }
    const what = `The protected resource metadata of upstream ${upstream}`;
    try {
      let res: Response;
      if (metadataUrl) {
        const target = new URL(metadataUrl);
        if (target.protocol !== 'https:' && !(target.protocol === 'http:' && isLoopbackHost(target.hostname)))
          throw authorizationFailed(
            upstream,
            `${what} is at ${metadataUrl}, which is not https (plain http is allowed for loopback hosts only)`,
          );
        res = await fetch(target, {
          headers: { accept: 'application/json' },
          signal: AbortSignal.timeout(OAUTH_TIMEOUT_MS),
          redirect: 'manual',
        });
      } else res = await oauth.resourceDiscoveryRequest(new URL(resource), requestOptions(resource));
      return await oauth.processResourceDiscoveryResponse(new URL(resource), res);
    } catch (e) {
      if (e instanceof oauth.OperationProcessingError && e.code === oauth.JSON_ATTRIBUTE_COMPARISON) {
        const said = (e.cause as { body?: { resource?: unknown } } | undefined)?.body?.resource;
        throw authorizationFailed(upstream, `${what} is for resource ${String(said)}, not ${resource}: set credentials.resource`);
      }
      if (e instanceof Error && e.name === 'GatewayError') throw e;
      throw authorizationFailed(upstream, describeFailure(`${what} (${metadataUrl ?? 'its well-known URL'})`, e));
    }
  }

  /** RFC 8414 metadata of `issuer`, else its OpenID discovery document. */
  private async serverMetadata(upstream: string, issuer: string): Promise<oauth.AuthorizationServer> {
    const id = new URL(issuer);
    let first: unknown;
    for (const algorithm of ['oauth2', 'oidc'] as const) {
      try {
        const res = await oauth.discoveryRequest(id, { algorithm, ...requestOptions(id) });
        return await oauth.processDiscoveryResponse(id, res);
      } catch (e) {
        first ??= e;
      }
    }
    throw authorizationFailed(upstream, describeFailure(`The metadata of authorization server ${issuer} (upstream ${upstream})`, first));
  }
}
