/**
 * RFC 8693 token exchange for `tokenExchange` upstreams (docs/security.md, "Upstream credentials"):
 * the caller's validated JWT is the `subject_token`, exchanged at the upstream's `tokenEndpoint` for
 * a token meant for the upstream (`audience`, `resource`, `scope` of its `credentials`), with the
 * gateway's `actor_token` when configured and `client_secret_basic` when `clientId` and
 * `clientSecret` are set. Tokens are cached per principal and upstream until `earlyRefreshMs`
 * before they expire; concurrent calls for the same principal and upstream share one request.
 * Built on oauth4webapi's `genericTokenEndpointRequest` and `processGenericTokenEndpointResponse`.
 */
import { LRUCache } from 'lru-cache';
import * as oauth from 'oauth4webapi';
import type { GatewayConfig } from '../config/schema.js';
import type { UpstreamCredentialsConfig } from '../config/credentials-schema.js';
import type { Logger } from '../observability/log.js';
import { principalHash } from '../security/auth.js';
import { authorizationFailed, describeFailure, requestOptions } from './oauth-http.js';
import type { CredentialCaller, HeldToken, TokenExchanger } from './types.js';

/** The grant type of RFC 8693 §2.1. */
export const TOKEN_EXCHANGE_GRANT = 'urn:ietf:params:oauth:grant-type:token-exchange';
/** RFC 8693 §3 token type identifiers. */
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
/** How long a token whose lifetime the endpoint did not say is reused, in ms. */
const UNSAID_LIFETIME_MS = 60_000;
/** Most tokens cached (principal × upstream). */
const MAX_CACHED = 100_000;

type ExchangeConfig = Extract<UpstreamCredentialsConfig, { mode: 'tokenExchange' }>;

/** The {@link TokenExchanger} of the gateway's `tokenExchange` upstreams. */
export class TokenExchange implements TokenExchanger {
  private readonly cache = new LRUCache<string, HeldToken & { useUntilMs: number }>({ max: MAX_CACHED });
  private readonly inflight = new Map<string, Promise<HeldToken>>();

  /** @param cfg the gateway config; its upstreams with `credentials.mode: "tokenExchange"` are served. */
  constructor(
    private readonly cfg: Pick<GatewayConfig, 'upstreams'>,
    private readonly log: Logger,
  ) {}

  /**
   * A token for `caller` at `upstream`: the cached one while it is valid for more than
   * `earlyRefreshMs`, else a new exchange (one at a time per principal and upstream).
   * @throws GatewayError -32603 `upstream-authorization` when the upstream is not a tokenExchange
   *   upstream, the caller presented no token, or the token endpoint fails or refuses (its OAuth
   *   `error` code or HTTP status in the message).
   */
  async token(upstream: string, caller: CredentialCaller): Promise<HeldToken> {
    const c = this.configOf(upstream);
    const key = `${upstream}\u0000${caller.principal}`;
    const cached = this.cache.get(key);
    if (cached && cached.useUntilMs > Date.now()) return { accessToken: cached.accessToken, expiresAtMs: cached.expiresAtMs };
    let running = this.inflight.get(key);
    if (!running) {
      running = this.exchange(upstream, c, caller, key).finally(() => this.inflight.delete(key));
      this.inflight.set(key, running);
    }
    return running;
  }

  /** Drops the cached token of `principal` at `upstream`, so the next call exchanges again. */
  forget(upstream: string, principal: string): void {
    this.cache.delete(`${upstream}\u0000${principal}`);
  }

  private configOf(upstream: string): ExchangeConfig {
    const c = this.cfg.upstreams[upstream]?.credentials;
    if (c?.mode !== 'tokenExchange') throw authorizationFailed(upstream, `Upstream ${upstream} does not use token exchange`);
    return c;
  }

  private async exchange(upstream: string, c: ExchangeConfig, caller: CredentialCaller, key: string): Promise<HeldToken> {
    if (!caller.token)
      throw authorizationFailed(
        upstream,
        `Upstream ${upstream} needs the caller's access token for token exchange, and none was presented`,
      );
    const endpoint = new URL(c.tokenEndpoint);
    const as: oauth.AuthorizationServer = { issuer: endpoint.origin, token_endpoint: endpoint.href };
    const client: oauth.Client = { client_id: c.clientId ?? 'mrtr-gateway' };
    const auth = c.clientId && c.clientSecret ? oauth.ClientSecretBasic(c.clientSecret) : oauth.None();
    const resource = c.resource ?? (this.cfg.upstreams[upstream] as { url?: string }).url;
    const params = new URLSearchParams({ subject_token: caller.token, subject_token_type: ACCESS_TOKEN_TYPE });
    if (c.audience) params.set('audience', c.audience);
    if (resource) params.set('resource', resource);
    if (c.scope) params.set('scope', c.scope);
    if (c.actorToken) {
      params.set('actor_token', c.actorToken);
      params.set('actor_token_type', ACCESS_TOKEN_TYPE);
    }
    const what = `The token endpoint ${endpoint.href} of upstream ${upstream}`;
    let response: oauth.TokenEndpointResponse;
    try {
      const res = await oauth.genericTokenEndpointRequest(as, client, auth, TOKEN_EXCHANGE_GRANT, params, requestOptions(endpoint));
      response = await oauth.processGenericTokenEndpointResponse(as, client, res);
    } catch (e) {
      const message = describeFailure(what, e);
      this.log.warn({ upstream, principal: principalHash(caller.principal), err: message }, 'token exchange failed');
      throw authorizationFailed(upstream, message);
    }
    const now = Date.now();
    const expiresAtMs = typeof response.expires_in === 'number' ? now + response.expires_in * 1000 : undefined;
    const useUntilMs = expiresAtMs === undefined ? now + UNSAID_LIFETIME_MS : expiresAtMs - c.earlyRefreshMs;
    const held: HeldToken = { accessToken: response.access_token, ...(expiresAtMs !== undefined ? { expiresAtMs } : {}) };
    if (useUntilMs > now) this.cache.set(key, { ...held, useUntilMs });
    this.log.debug({ upstream, principal: principalHash(caller.principal), expiresAtMs }, 'token exchanged');
    return held;
  }
}
