/**
 * Per-user grants of `oauth` upstreams (docs/security.md, "Upstream credentials"): each principal's
 * access and refresh token for each upstream, obtained through the consent routes
 * (src/credentials/consent.ts), kept in the shared store (src/store/grants.ts) with the tokens
 * sealed (src/security/sealed-box.ts, bound to the upstream and principal), refreshed when the
 * access token expired or is within {@link REFRESH_BEFORE_MS} of it (by one replica at a time), revoked at the server when it
 * offers revocation (RFC 7009). A refresh the server refuses drops the grant: the caller is asked
 * for consent again.
 */
import { randomUUID } from 'node:crypto';
import * as oauth from 'oauth4webapi';
import type { GatewayConfig } from '../config/schema.js';
import type { Logger } from '../observability/log.js';
import { principalHash } from '../security/auth.js';
import type { SealedBox } from '../security/sealed-box.js';
import type { GrantStore, StoredGrant } from '../store/grants.js';
import type { SpentStates } from '../store/shared.js';
import { ConsentFlow } from './consent.js';
import { clientAuth, OAuthClients } from './oauth-client.js';
import { OAuthDiscovery, oauthConfigOf } from './oauth-discovery.js';
import { authorizationFailed, describeFailure, requestOptions } from './oauth-http.js';
import type { GrantInfo, GrantWait, HeldToken, UserGrants } from './types.js';

/** An access token is refreshed when it expires within this, in ms. */
export const REFRESH_BEFORE_MS = 30_000;
/** Longest a refresh holds the grant's refresh lock (other replicas wait for it that long), in ms. */
const REFRESH_LOCK_MS = 15_000;
/** How often {@link OAuthGrants.waitForGrant} (and a replica waiting for another's refresh) reads the store, in ms. */
const WAIT_POLL_MS = 250;

/** What `StoredGrant.sealed` holds: the tokens and where they came from. */
export interface GrantTokens {
  accessToken: string;
  refreshToken?: string;
  /** The authorization server's issuer, token endpoint and revocation endpoint (when it has one). */
  issuer: string;
  tokenEndpoint: string;
  revocationEndpoint?: string;
  /** The client the grant was issued to. */
  clientId: string;
  /** The resource (RFC 8707) the tokens are for. */
  resource: string;
}

/** What {@link OAuthGrants} is built from. */
export interface OAuthGrantsDeps {
  cfg: Pick<GatewayConfig, 'upstreams' | 'credentials' | 'http'>;
  /** Where grants and registered clients live (the shared store's `grants`). */
  store: GrantStore;
  /** The single-use ledger of the consent `state` (the shared store's `spent`). */
  spent: SpentStates;
  /** Seals the tokens, the consent links and the state (the credentials keys). */
  box: SealedBox;
  log: Logger;
  /** The gateway's own base URL when `http.publicUrl` is not set: the address it listens on, once it does. */
  listenUrl: () => string | undefined;
}

const sealContext = (upstream: string, principal: string) => `grant\n${upstream}\n${principal}`;

/** The {@link UserGrants} of the gateway's `oauth` upstreams. */
export class OAuthGrants implements UserGrants {
  readonly discovery: OAuthDiscovery;
  readonly clients: OAuthClients;
  /** The consent start and callback (served by src/http/routes/credentials.ts). */
  readonly consent: ConsentFlow;
  private readonly refreshing = new Map<string, Promise<HeldToken | undefined>>();

  constructor(private readonly deps: OAuthGrantsDeps) {
    this.discovery = new OAuthDiscovery(deps.cfg);
    this.clients = new OAuthClients(deps.store, deps.box, deps.log);
    this.consent = new ConsentFlow({
      cfg: deps.cfg,
      box: deps.box,
      spent: deps.spent,
      discovery: this.discovery,
      clients: this.clients,
      log: deps.log,
      baseUrl: () => this.baseUrl(),
      save: (upstream, principal, tokens, response) => this.save(upstream, principal, tokens, response),
      failed: (upstream, principal, why) => this.failed(upstream, principal, why),
    });
  }

  /** The gateway's base URL for consent links and the redirect URI: `http.publicUrl`, else the listen address. */
  baseUrl(): string | undefined {
    return this.deps.cfg.http.publicUrl?.replace(/\/$/, '') ?? this.deps.listenUrl();
  }

  /**
   * The access token of `principal` at `upstream`, refreshed first when it expired or expires within
   * {@link REFRESH_BEFORE_MS}; undefined when there is no usable grant (none, sealed with a key no
   * longer configured, expired without a refresh token, or its refresh refused: then dropped).
   * @throws GatewayError -32603 upstream-authorization when the token endpoint cannot be reached.
   * @throws StoreUnavailable when the shared store cannot be reached.
   */
  async accessToken(upstream: string, principal: string): Promise<HeldToken | undefined> {
    const g = await this.deps.store.get(upstream, principal);
    if (!g) return undefined;
    const t = this.deps.box.open<GrantTokens>(g.sealed, sealContext(upstream, principal));
    if (!t) {
      this.deps.log.warn(
        { upstream, principal: principalHash(principal) },
        'stored grant does not open with the credentials keys: dropped',
      );
      await this.deps.store.delete(upstream, principal);
      return undefined;
    }
    if (g.expiresAtMs === undefined || g.expiresAtMs - REFRESH_BEFORE_MS > Date.now())
      return { accessToken: t.accessToken, ...(g.expiresAtMs !== undefined ? { expiresAtMs: g.expiresAtMs } : {}) };
    if (!t.refreshToken) {
      await this.deps.store.delete(upstream, principal);
      return undefined;
    }
    const key = `${upstream}\u0000${principal}`;
    let running = this.refreshing.get(key);
    if (!running) {
      running = this.refreshLocked(upstream, principal, g, t).finally(() => this.refreshing.delete(key));
      this.refreshing.set(key, running);
    }
    return running;
  }

  /** The token of the stored grant `g`, or undefined when it does not open. */
  private heldOf(upstream: string, principal: string, g: StoredGrant): HeldToken | undefined {
    const t = this.deps.box.open<GrantTokens>(g.sealed, sealContext(upstream, principal));
    return t && { accessToken: t.accessToken, ...(g.expiresAtMs !== undefined ? { expiresAtMs: g.expiresAtMs } : {}) };
  }

  /**
   * Refreshes the grant `g` under its refresh lock in the shared store, so that one replica
   * refreshes and the others take its result (a refresh token used twice may make the server
   * revoke the grant); see {@link accessToken}.
   */
  private async refreshLocked(upstream: string, principal: string, g: StoredGrant, t: GrantTokens): Promise<HeldToken | undefined> {
    const release = await this.deps.store.lock(upstream, principal, REFRESH_LOCK_MS);
    if (!release) return this.refreshedElsewhere(upstream, principal, g);
    try {
      const now = await this.deps.store.get(upstream, principal);
      if (!now) return undefined;
      // Refreshed (or consented again) since it was read.
      if (now.sealed !== g.sealed) return this.heldOf(upstream, principal, now);
      return await this.refresh(upstream, principal, g, t);
    } finally {
      await release().catch(() => {});
    }
  }

  /** Waits (polling the store) for the replica holding the refresh lock to store the refreshed grant, or drop it. */
  private async refreshedElsewhere(upstream: string, principal: string, g: StoredGrant): Promise<HeldToken | undefined> {
    const deadline = Date.now() + REFRESH_LOCK_MS;
    while (Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, WAIT_POLL_MS));
      const now = await this.deps.store.get(upstream, principal);
      if (!now) return undefined;
      if (now.sealed !== g.sealed) return this.heldOf(upstream, principal, now);
    }
    throw authorizationFailed(upstream, `Another replica's refresh of this grant did not finish within ${REFRESH_LOCK_MS / 1000} s; retry`);
  }

  /** Refreshes the grant `g` (tokens `t`); see {@link accessToken}. */
  private async refresh(upstream: string, principal: string, g: StoredGrant, t: GrantTokens): Promise<HeldToken | undefined> {
    const c = oauthConfigOf(this.deps.cfg, upstream);
    const as: oauth.AuthorizationServer = { issuer: t.issuer, token_endpoint: t.tokenEndpoint };
    const client = (await this.clients.byId(upstream, c, t.clientId)) ?? { client_id: t.clientId };
    const log = { upstream, principal: principalHash(principal) };
    let response: oauth.TokenEndpointResponse;
    try {
      const res = await oauth.refreshTokenGrantRequest(as, client, clientAuth(client), t.refreshToken!, {
        additionalParameters: { resource: t.resource },
        ...requestOptions(t.tokenEndpoint),
      });
      response = await oauth.processRefreshTokenResponse(as, client, res);
    } catch (e) {
      const message = describeFailure(`The token endpoint ${t.tokenEndpoint} of upstream ${upstream}`, e);
      // Refused (an OAuth error such as invalid_grant): the grant is dead. Anything else (unreachable,
      // a server error, an unusable answer) may pass: the grant is kept.
      if (!(e instanceof oauth.ResponseBodyError && e.status < 500)) {
        this.deps.log.warn({ ...log, err: message }, 'grant refresh failed');
        throw authorizationFailed(upstream, message);
      }
      // Another replica may have refreshed it first (a rotated refresh token is then refused here).
      const now = await this.deps.store.get(upstream, principal);
      if (now && now.sealed !== g.sealed) return this.heldOf(upstream, principal, now);
      this.deps.log.info({ ...log, err: message }, 'grant refresh refused: grant dropped, consent will be asked again');
      await this.deps.store.delete(upstream, principal);
      return undefined;
    }
    const saved = await this.save(upstream, principal, { ...t, refreshToken: response.refresh_token ?? t.refreshToken }, response);
    this.deps.log.debug(log, 'grant refreshed');
    return { accessToken: response.access_token, ...(saved.expiresAtMs !== undefined ? { expiresAtMs: saved.expiresAtMs } : {}) };
  }

  /**
   * Stores the grant of `principal` at `upstream` from a token `response` (`tokens` says where it
   * came from; its access and refresh token are replaced by the response's).
   */
  private async save(
    upstream: string,
    principal: string,
    tokens: Omit<GrantTokens, 'accessToken'>,
    response: oauth.TokenEndpointResponse,
  ): Promise<StoredGrant> {
    const sealed: GrantTokens = {
      ...tokens,
      accessToken: response.access_token,
      ...(response.refresh_token ? { refreshToken: response.refresh_token } : {}),
    };
    const now = Date.now();
    const grant: StoredGrant = {
      upstream,
      principal,
      createdAtMs: now,
      ...(typeof response.expires_in === 'number' ? { expiresAtMs: now + response.expires_in * 1000 } : {}),
      refreshable: !!sealed.refreshToken,
      ...(typeof response.scope === 'string' ? { scope: response.scope } : {}),
      sealed: this.deps.box.seal(sealed, sealContext(upstream, principal)),
    };
    await this.deps.store.put(grant);
    return grant;
  }

  /**
   * A consent link for `principal` at `upstream`: the start route with a sealed link, valid
   * `credentials.consentTtlMs`, and a fresh elicitation id.
   * @throws GatewayError -32603 upstream-authorization when the gateway's URL is not known (set
   *   `http.publicUrl`) or `upstream` is not an `oauth` upstream.
   */
  async consentLink(upstream: string, principal: string): Promise<{ url: string; elicitationId: string }> {
    oauthConfigOf(this.deps.cfg, upstream);
    if (!this.baseUrl())
      throw authorizationFailed(
        upstream,
        `The gateway does not know its own URL for the consent link of upstream ${upstream}: set http.publicUrl`,
      );
    const elicitationId = randomUUID();
    return { url: this.consent.link(upstream, principal, elicitationId), elicitationId };
  }

  /**
   * Drops the stored grant (the upstream refused its token), without revoking it at the server;
   * with `refused`, only when it matches the stored access token, so a grant another request
   * refreshed meanwhile is kept.
   */
  async forget(upstream: string, principal: string, refused?: (accessToken: string) => boolean): Promise<void> {
    if (refused) {
      const g = await this.deps.store.get(upstream, principal);
      const t = g && this.deps.box.open<GrantTokens>(g.sealed, sealContext(upstream, principal));
      if (t && !refused(t.accessToken)) return;
    }
    await this.deps.store.delete(upstream, principal);
  }

  /**
   * Waits until `principal` holds a grant for `upstream` (stored by any replica: the store is read
   * every {@link WAIT_POLL_MS}); not granted once a consent begun at or after `sinceMs` failed at
   * the callback (recorded by any replica), after `ms`, or when `signal` aborts.
   */
  async waitForGrant(upstream: string, principal: string, ms: number, signal?: AbortSignal, sinceMs = Date.now()): Promise<GrantWait> {
    const deadline = Date.now() + ms;
    for (;;) {
      if (signal?.aborted) return { granted: false, why: 'the client went away' };
      try {
        if (await this.deps.store.get(upstream, principal)) return { granted: true };
        const failed = await this.deps.store.failure(upstream, principal);
        if (failed && failed.atMs >= sinceMs) return { granted: false, why: failed.why };
      } catch {
        /* the store is unreachable for now: read again */
      }
      const left = deadline - Date.now();
      if (left <= 0) return { granted: false, why: `no grant within credentials.consentWaitMs=${ms} ms` };
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', done);
          resolve();
        };
        const timer = setTimeout(done, Math.min(WAIT_POLL_MS, left));
        signal?.addEventListener('abort', done, { once: true });
      });
    }
  }

  /** Records a consent that failed at the callback, so waits for the grant end ({@link waitForGrant}). */
  private async failed(upstream: string, principal: string, why: string): Promise<void> {
    await this.deps.store.fail(upstream, principal, why, this.deps.cfg.credentials.consentTtlMs).catch((e: unknown) => {
      this.deps.log.warn({ upstream, principal: principalHash(principal), err: (e as Error).message }, 'consent failure not recorded');
    });
  }

  /** The grants held (of `upstream` only, when given), without their tokens. */
  async grants(upstream?: string): Promise<GrantInfo[]> {
    return (await this.deps.store.list(upstream)).map(({ sealed: _sealed, ...info }) => info);
  }

  /**
   * Removes `principal`'s grant for `upstream` and revokes its tokens at the server when it has a
   * revocation endpoint (a failure there is logged; the grant is gone from the gateway anyway).
   * @returns false when there was no grant.
   */
  async revoke(upstream: string, principal: string): Promise<boolean> {
    const g = await this.deps.store.get(upstream, principal);
    if (!g) return false;
    await this.deps.store.delete(upstream, principal);
    const t = this.deps.box.open<GrantTokens>(g.sealed, sealContext(upstream, principal));
    if (t?.revocationEndpoint) await this.revokeAtServer(upstream, principal, t);
    this.deps.log.info({ upstream, principal: principalHash(principal) }, 'grant revoked');
    return true;
  }

  private async revokeAtServer(upstream: string, principal: string, t: GrantTokens): Promise<void> {
    const as: oauth.AuthorizationServer = { issuer: t.issuer, revocation_endpoint: t.revocationEndpoint };
    const c = oauthConfigOf(this.deps.cfg, upstream);
    const client = (await this.clients.byId(upstream, c, t.clientId).catch(() => undefined)) ?? { client_id: t.clientId };
    for (const token of [t.refreshToken, t.accessToken]) {
      if (!token) continue;
      try {
        const res = await oauth.revocationRequest(as, client, clientAuth(client), token, requestOptions(t.revocationEndpoint!));
        await oauth.processRevocationResponse(res);
      } catch (e) {
        const err = describeFailure(`The revocation endpoint ${t.revocationEndpoint} of upstream ${upstream}`, e);
        this.deps.log.warn({ upstream, principal: principalHash(principal), err }, 'token revocation at the server failed');
      }
    }
  }
}
