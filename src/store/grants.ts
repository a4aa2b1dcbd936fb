/**
 * Where per-user upstream grants live (docs/security.md, "Upstream credentials"): one record per
 * principal and upstream, and the OAuth client the gateway registered at each upstream's
 * authorization server. The store keeps what it is given: the metadata the admin page shows (who,
 * which upstream, expiry, created, refreshable, scope) in clear, the tokens and the client secret
 * only sealed (src/security/sealed-box.ts, by src/credentials/grants.ts). In memory for one
 * replica; on Redis (src/store/redis.ts) every replica sees the same, so a consent completed
 * through one replica's callback serves a call on another.
 */

/** One stored grant. `sealed` holds the tokens (encrypted and authenticated); the rest is plain. */
export interface StoredGrant {
  upstream: string;
  principal: string;
  /** When the grant was stored (or last refreshed), ms since the epoch. */
  createdAtMs: number;
  /** When the access token expires, ms since the epoch (absent: the server did not say). */
  expiresAtMs?: number;
  /** Whether a refresh token is held (inside `sealed`). */
  refreshable: boolean;
  scope?: string;
  /** The sealed tokens and the token endpoint and client they came from. Never a token in clear. */
  sealed: string;
}

/** Grants per principal and upstream, and registered clients per upstream. */
export interface GrantStore {
  /** The grant of `principal` at `upstream`, or undefined. @throws StoreUnavailable */
  get(upstream: string, principal: string): Promise<StoredGrant | undefined>;
  /** Stores (or replaces) the grant of its principal at its upstream. @throws StoreUnavailable */
  put(grant: StoredGrant): Promise<void>;
  /** Removes the grant; false when there was none. @throws StoreUnavailable */
  delete(upstream: string, principal: string): Promise<boolean>;
  /** Every grant held (of `upstream` only, when given). @throws StoreUnavailable */
  list(upstream?: string): Promise<StoredGrant[]>;
  /** The sealed client registered at `upstream`'s authorization server, or undefined. @throws StoreUnavailable */
  client(upstream: string): Promise<string | undefined>;
  /**
   * Stores `sealed` as `upstream`'s client unless one is stored already (unless `replace`, which
   * overwrites); resolves with the client stored after it (the other replica's, when it won the
   * race). @throws StoreUnavailable
   */
  putClient(upstream: string, sealed: string, replace?: boolean): Promise<string>;
  /**
   * Takes the refresh lock of a grant for `ttlMs` (across replicas: of two at once, one gets it),
   * so one replica refreshes while the others wait for its result (a refresh token used twice may
   * make the server revoke the grant). Resolves with the release, or undefined when another holds it.
   * @throws StoreUnavailable
   */
  lock(upstream: string, principal: string, ttlMs: number): Promise<(() => Promise<void>) | undefined>;
  /**
   * Records that `principal`'s consent for `upstream` failed at the callback (`why`, a sentence for
   * the user; never a token), for `ttlMs`, so a session waiting for the grant on any replica stops
   * waiting. @throws StoreUnavailable
   */
  fail(upstream: string, principal: string, why: string, ttlMs: number): Promise<void>;
  /** The last recorded consent failure of `principal` at `upstream`, while it lasts. @throws StoreUnavailable */
  failure(upstream: string, principal: string): Promise<ConsentFailure | undefined>;
}

/** A consent that failed at the callback: why (for the user), and when (ms since the epoch). */
export interface ConsentFailure {
  why: string;
  atMs: number;
}

/** The field of a grant under which stores keep it: upstream and principal, unambiguously. */
export const grantField = (upstream: string, principal: string): string => JSON.stringify([upstream, principal]);

/** Grants in this process's memory (one replica). */
export class MemoryGrantStore implements GrantStore {
  private readonly grants = new Map<string, StoredGrant>();
  private readonly clients = new Map<string, string>();
  /** Refresh locks: until when each is held (ms since the epoch). */
  private readonly locks = new Map<string, number>();
  /** Consent failures, each with until when it lasts (ms since the epoch). */
  private readonly failures = new Map<string, ConsentFailure & { untilMs: number }>();

  async get(upstream: string, principal: string): Promise<StoredGrant | undefined> {
    const g = this.grants.get(grantField(upstream, principal));
    return g && { ...g };
  }

  async put(grant: StoredGrant): Promise<void> {
    this.grants.set(grantField(grant.upstream, grant.principal), { ...grant });
  }

  async delete(upstream: string, principal: string): Promise<boolean> {
    return this.grants.delete(grantField(upstream, principal));
  }

  async list(upstream?: string): Promise<StoredGrant[]> {
    return [...this.grants.values()].filter((g) => upstream === undefined || g.upstream === upstream).map((g) => ({ ...g }));
  }

  async client(upstream: string): Promise<string | undefined> {
    return this.clients.get(upstream);
  }

  async putClient(upstream: string, sealed: string, replace = false): Promise<string> {
    if (replace || !this.clients.has(upstream)) this.clients.set(upstream, sealed);
    return this.clients.get(upstream)!;
  }

  async lock(upstream: string, principal: string, ttlMs: number): Promise<(() => Promise<void>) | undefined> {
    const field = grantField(upstream, principal);
    const now = Date.now();
    if ((this.locks.get(field) ?? 0) > now) return undefined;
    const until = now + ttlMs;
    this.locks.set(field, until);
    return async () => void (this.locks.get(field) === until && this.locks.delete(field));
  }

  async fail(upstream: string, principal: string, why: string, ttlMs: number): Promise<void> {
    const now = Date.now();
    this.failures.set(grantField(upstream, principal), { why, atMs: now, untilMs: now + ttlMs });
  }

  async failure(upstream: string, principal: string): Promise<ConsentFailure | undefined> {
    const field = grantField(upstream, principal);
    const f = this.failures.get(field);
    if (f && f.untilMs <= Date.now()) this.failures.delete(field);
    return f && f.untilMs > Date.now() ? { why: f.why, atMs: f.atMs } : undefined;
  }
}
