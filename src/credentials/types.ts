/**
 * The contract of per-user upstream credentials (docs/security.md, "Upstream credentials"): what the
 * router asks before it hands a request to a cell, what the front door's consent routes and the
 * admin page use. The policy (which caller gets which token, when to ask, where grants live) is in
 * src/credentials/credentials.ts; this file has the types and the one error.
 */
import type { UpstreamCredential } from '../upstream/credential.js';

export type { UpstreamCredential };

/** Who asks: the principal and the bearer token they presented to the gateway (a validated JWT in jwt mode). */
export interface CredentialCaller {
  principal: string;
  token?: string;
}

/**
 * The caller holds no usable grant for an `oauth` upstream: the user must consent first. The router
 * turns it into a URL-mode input request (a 2026-07-28 client: an `input_required` round with
 * `elicitation/create` `mode: "url"`; a legacy client: `elicitation/create` in url mode, or -32042
 * when it did not declare url mode).
 */
export class ConsentRequired extends Error {
  override name = 'ConsentRequired';
  constructor(
    /** Upstream name. */
    readonly upstream: string,
    /** The gateway's own start route for this principal and upstream (a link valid `credentials.consentTtlMs`). */
    readonly url: string,
    /** A fresh id for the 2025-11-25 `elicitationId` and `notifications/elicitation/complete`. */
    readonly elicitationId: string,
    message: string,
  ) {
    super(message);
  }
}

/** How a wait for a user's grant ended: granted, or not and why (a sentence for the user). */
export type GrantWait = { granted: true } | { granted: false; why: string };

/** One stored grant as the admin page and the revoke route see it: never a token. */
export interface GrantInfo {
  upstream: string;
  principal: string;
  /** When the access token expires, ms since the epoch (undefined: the server did not say). */
  expiresAtMs?: number;
  /** Whether a refresh token is held. */
  refreshable: boolean;
  /** When the grant was stored, ms since the epoch. */
  createdAtMs: number;
  scope?: string;
}

/** Per-user upstream credentials, as the router, the front door and the admin page use them. */
export interface UpstreamCredentials {
  /** Whether `upstream`'s credential depends on the caller (tokenExchange, oauth, forwardAuthorization). */
  perCaller(upstream: string): boolean;
  /** Whether `upstream` uses per-user grants (`oauth`), which may need a consent round. */
  needsConsent(upstream: string): boolean;
  /**
   * The credential of `caller` for `upstream`, undefined for a static upstream. Cached tokens are
   * reused until shortly before they expire; an expired grant is refreshed.
   * @throws ConsentRequired when an `oauth` upstream has no usable grant for the principal (none
   *   yet, revoked, or its refresh failed).
   * @throws GatewayError -32603 `data.reason` `upstream-authorization` when a token endpoint or
   *   an authorization server fails (the message says which; never a token).
   */
  resolve(upstream: string, caller: CredentialCaller): Promise<UpstreamCredential | undefined>;
  /**
   * The upstream refused `credential`, the credential of `principal` (HTTP 401 or 403: expired,
   * revoked, wrong audience): the cached token or the grant is dropped, so the next {@link resolve}
   * exchanges again or asks for consent again. A grant whose token changed since `credential` was
   * resolved (another request refreshed it) is kept.
   */
  refused(upstream: string, principal: string, credential: UpstreamCredential): Promise<void>;
  /**
   * Waits until `principal` holds a grant for `upstream` (its consent completed on any replica):
   * `{granted: false, why}` once a consent begun at or after `sinceMs` (ms since the epoch; default:
   * now) failed at the callback (the user denied access, the code was refused), after `ms`, or when
   * `signal` aborts.
   */
  waitForGrant(upstream: string, principal: string, ms: number, signal?: AbortSignal, sinceMs?: number): Promise<GrantWait>;
  /** The grants held, for the admin page (`upstream` narrows it). */
  grants(upstream?: string): Promise<GrantInfo[]>;
  /** Removes `principal`'s grant for `upstream` (and revokes it at the server when it offers revocation); false when there was none. */
  revoke(upstream: string, principal: string): Promise<boolean>;
}

/** A token the gateway holds for one principal and upstream. */
export interface HeldToken {
  accessToken: string;
  /** When it expires, ms since the epoch (undefined: the server did not say). */
  expiresAtMs?: number;
}

/**
 * RFC 8693 token exchange for `tokenExchange` upstreams (src/credentials/token-exchange.ts): the
 * caller's JWT for a token meant for the upstream, cached per principal and upstream.
 */
export interface TokenExchanger {
  /**
   * A token for `caller` at `upstream` (cached until `earlyRefreshMs` before it expires).
   * @throws GatewayError -32603 `upstream-authorization` when the caller has no token to exchange
   *   or the token endpoint fails or refuses (its `error` code in the message, never a token).
   */
  token(upstream: string, caller: CredentialCaller): Promise<HeldToken>;
  /** Drops the cached token of `principal` at `upstream` (the upstream refused it). */
  forget(upstream: string, principal: string): void;
}

/**
 * Per-user grants of `oauth` upstreams (src/credentials/grants.ts and src/credentials/consent.ts):
 * stored encrypted in the shared store, refreshed when expired, obtained through the consent routes.
 */
export interface UserGrants {
  /**
   * The principal's access token for `upstream`, refreshed first when it expired (or is about to);
   * undefined when there is no usable grant (none, revoked, or the refresh failed: the grant is then
   * dropped).
   * @throws GatewayError -32603 `upstream-authorization` when the authorization server cannot be reached.
   */
  accessToken(upstream: string, principal: string): Promise<HeldToken | undefined>;
  /** A consent link for `principal` at `upstream`: the gateway's start route, valid `credentials.consentTtlMs`. */
  consentLink(upstream: string, principal: string): Promise<{ url: string; elicitationId: string }>;
  /**
   * Drops the stored grant (the upstream refused its token); with `refused`, only when the stored
   * access token is one it matches (a grant refreshed since is kept).
   */
  forget(upstream: string, principal: string, refused?: (accessToken: string) => boolean): Promise<void>;
  waitForGrant(upstream: string, principal: string, ms: number, signal?: AbortSignal, sinceMs?: number): Promise<GrantWait>;
  grants(upstream?: string): Promise<GrantInfo[]>;
  revoke(upstream: string, principal: string): Promise<boolean>;
}
