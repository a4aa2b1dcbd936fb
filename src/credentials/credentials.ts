/**
 * The policy of per-user upstream credentials (docs/security.md, "Upstream credentials"): which
 * caller gets which credential for which upstream, by the upstream's `credentials.mode`:
 *
 * - `static`: none (the upstream's own `headers` / `env` apply to everyone), except with
 *   `forwardAuthorization`, where the caller's own bearer token goes on as `Authorization` (token
 *   passthrough: a warning is logged once per such upstream at start, see {@link Credentials.warnAtStart}).
 * - `tokenExchange`: the {@link TokenExchanger}'s token for the caller (RFC 8693, cached there).
 * - `oauth`: the principal's grant from {@link UserGrants}; none usable: {@link ConsentRequired}
 *   with the consent link.
 *
 * A token goes into `Authorization: Bearer …` (HTTP upstreams) or into the environment variable
 * `credentials.env` of the principal's own stdio child. The credential's `key` is a digest of the
 * principal and the token (never the token), part of the session pool's key.
 */
import { createHash } from 'node:crypto';
import type { GatewayConfig, UpstreamConfig } from '../config/schema.js';
import type { Logger } from '../observability/log.js';
import type { UpstreamCredential } from '../upstream/credential.js';
import {
  ConsentRequired,
  type CredentialCaller,
  type GrantInfo,
  type GrantWait,
  type TokenExchanger,
  type UpstreamCredentials,
  type UserGrants,
} from './types.js';

/** base64url SHA-256 of `parts` joined by NUL. */
function digest(...parts: string[]): string {
  return createHash('sha256').update(parts.join('\u0000')).digest('base64url');
}

/** The credential that carries `token` to upstream `cfg`: a bearer header over HTTP, the variable `env` on stdio. */
function carrying(cfg: UpstreamConfig, key: string, token: string, env: string | undefined): UpstreamCredential {
  if (cfg.transport === 'stdio') return { key, headers: {}, env: env ? { [env]: token } : {} };
  return { key, headers: { authorization: `Bearer ${token}` }, env: {} };
}

/** Per-user upstream credentials (see the file header). */
export class Credentials implements UpstreamCredentials {
  constructor(
    private readonly cfg: Pick<GatewayConfig, 'upstreams'>,
    private readonly exchanger: TokenExchanger,
    private readonly userGrants: UserGrants,
  ) {}

  private upstream(name: string): UpstreamConfig {
    const u = this.cfg.upstreams[name];
    if (!u) throw new Error(`no upstream '${name}'`);
    return u;
  }

  /** Whether `upstream` sends the caller's own token as it is (`forwardAuthorization`, HTTP only). */
  private forwards(u: UpstreamConfig): boolean {
    return u.transport !== 'stdio' && u.forwardAuthorization && u.credentials.mode === 'static';
  }

  perCaller(upstream: string): boolean {
    const u = this.cfg.upstreams[upstream];
    return !!u && (u.credentials.mode !== 'static' || this.forwards(u));
  }

  needsConsent(upstream: string): boolean {
    return this.cfg.upstreams[upstream]?.credentials.mode === 'oauth';
  }

  async resolve(upstream: string, caller: CredentialCaller): Promise<UpstreamCredential | undefined> {
    const u = this.upstream(upstream);
    const c = u.credentials;
    switch (c.mode) {
      case 'static':
        if (!this.forwards(u) || !caller.token) return undefined;
        return { key: digest(caller.token), headers: { authorization: `Bearer ${caller.token}` }, env: {} };
      case 'tokenExchange': {
        const held = await this.exchanger.token(upstream, caller);
        return carrying(u, digest(caller.principal, held.accessToken), held.accessToken, c.env);
      }
      case 'oauth': {
        const held = await this.userGrants.accessToken(upstream, caller.principal);
        if (held) return carrying(u, digest(caller.principal, held.accessToken), held.accessToken, c.env);
        const link = await this.userGrants.consentLink(upstream, caller.principal);
        throw new ConsentRequired(
          upstream,
          link.url,
          link.elicitationId,
          `Upstream '${upstream}' needs your authorization: open the link to grant the gateway access on your behalf`,
        );
      }
    }
  }

  async refused(upstream: string, principal: string, credential: UpstreamCredential): Promise<void> {
    const mode = this.cfg.upstreams[upstream]?.credentials.mode;
    if (mode === 'tokenExchange') this.exchanger.forget(upstream, principal);
    else if (mode === 'oauth') await this.userGrants.forget(upstream, principal, (token) => digest(principal, token) === credential.key);
  }

  waitForGrant(upstream: string, principal: string, ms: number, signal?: AbortSignal, sinceMs?: number): Promise<GrantWait> {
    return this.userGrants.waitForGrant(upstream, principal, ms, signal, sinceMs);
  }

  grants(upstream?: string): Promise<GrantInfo[]> {
    return this.userGrants.grants(upstream);
  }

  revoke(upstream: string, principal: string): Promise<boolean> {
    return this.userGrants.revoke(upstream, principal);
  }

  /**
   * Logs once per upstream with `forwardAuthorization`, at start: the caller's own token goes on
   * (token passthrough), which the MCP authorization rules forbid unless the upstream accepts tokens
   * of the gateway's issuer and checks that their audience is its own.
   */
  warnAtStart(log: Logger): void {
    for (const [name, u] of Object.entries(this.cfg.upstreams)) {
      if (!this.forwards(u)) continue;
      log.warn(
        { upstream: name },
        "forwardAuthorization sends each caller's own token to this upstream (token passthrough), which the MCP authorization rules forbid unless the upstream trusts the gateway's token issuer and checks that each token's audience is its own; prefer credentials.mode tokenExchange or oauth",
      );
    }
  }
}
