/**
 * Downstream authentication: who is calling (the principal). Modes from `auth` in the config:
 * `none` (everyone is `anonymous`), `apiKeys` (`Authorization: Bearer <key>`, keys stored as
 * SHA-256), `jwt` (OAuth 2.1 resource server: a JWT access token checked with jose against the
 * issuer's JWKS, audience and required scopes; principal = issuer + subject).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { readFileSync } from 'node:fs';
import { createLocalJWKSet, createRemoteJWKSet, errors as joseErrors, jwtVerify, type JWTVerifyGetKey, type JWTVerifyOptions } from 'jose';
import type { GatewayConfig } from '../config/schema.js';

/** Principal of unauthenticated callers when `auth.mode` is `none`. */
export const ANONYMOUS = 'anonymous';

/** Who is calling, and the bearer token they presented (for `forwardAuthorization`). */
export interface Caller {
  principal: string;
  token?: string;
}

/**
 * Authentication failed. `status` is 401 (no or bad credentials) or 403 (insufficient scope);
 * `error` is the RFC 6750 error code for `WWW-Authenticate` (absent when no credentials were sent).
 */
export class AuthError extends Error {
  override name = 'AuthError';
  constructor(
    readonly status: 401 | 403,
    message: string,
    readonly error?: 'invalid_token' | 'insufficient_scope' | 'invalid_request',
    readonly scope?: string,
  ) {
    super(message);
  }
}

/**
 * The caller's credentials could not be checked because the issuer's keys (`auth.jwksUrl`) could
 * not be fetched: the front door answers 503 / -32603 with `Retry-After`, not a 401 that would make
 * the client drop a good token.
 */
export class AuthUnavailable extends Error {
  override name = 'AuthUnavailable';
}

/** jose's codes for a key set that could not be fetched or read (as opposed to a bad token). */
const JWKS_UNAVAILABLE = new Set(['ERR_JWKS_TIMEOUT', 'ERR_JWKS_INVALID', 'ERR_JOSE_GENERIC']);

const sha256 = (s: string) => createHash('sha256').update(s, 'utf8').digest();

const hashes = new LRUCache<string, string>({ max: 10_000 });

/** Short, stable, non-reversible form of a principal for logs and metrics (16 hex digits of its SHA-256). */
export function principalHash(principal: string): string {
  let h = hashes.get(principal);
  if (h === undefined) hashes.set(principal, (h = sha256(principal).toString('hex').slice(0, 16)));
  return h;
}

/**
 * `jwtVerify` against a key set, where several keys of the set may match the token's `kid` and
 * `alg` (an issuer that rotates keys under one `kid`): jose then raises
 * `ERR_JWKS_MULTIPLE_MATCHING_KEYS` with the candidates, and each is tried in turn. A token that
 * verifies under none fails as `ERR_JWS_SIGNATURE_VERIFICATION_FAILED`; any other failure of a
 * candidate (an expired token, a wrong audience) is the token's own and is raised as it is.
 */
async function verifyAgainstKeySet(token: string, keys: JWTVerifyGetKey, options: JWTVerifyOptions) {
  try {
    return await jwtVerify(token, keys, options);
  } catch (e) {
    if (!(e instanceof joseErrors.JWKSMultipleMatchingKeys)) throw e;
    for await (const candidate of e) {
      try {
        return await jwtVerify(token, candidate, options);
      } catch (inner) {
        if (!(inner instanceof joseErrors.JWSSignatureVerificationFailed)) throw inner;
      }
    }
    throw new joseErrors.JWSSignatureVerificationFailed();
  }
}

function bearer(header: string | null | undefined): string | undefined {
  if (!header) return undefined;
  const m = /^Bearer[ ]+([A-Za-z0-9\-._~+/]+=*)\s*$/i.exec(header);
  if (!m) throw new AuthError(401, 'The Authorization header must be "Bearer <token>"', 'invalid_request');
  return m[1];
}

/** Authenticates requests according to `auth`. */
export class Authenticator {
  private readonly keys: { hash: Buffer; principal: string }[] = [];
  private readonly jwks: JWTVerifyGetKey | undefined;

  constructor(private readonly cfg: GatewayConfig['auth']) {
    if (cfg.mode === 'apiKeys') {
      for (const k of cfg.keys) this.keys.push({ hash: k.sha256 ? Buffer.from(k.sha256, 'hex') : sha256(k.key!), principal: k.principal });
    }
    if (cfg.mode === 'jwt') {
      this.jwks = cfg.jwksUrl
        ? createRemoteJWKSet(new URL(cfg.jwksUrl))
        : createLocalJWKSet(JSON.parse(readFileSync(cfg.jwksFile!, 'utf8')));
    }
  }

  /** True when requests must carry credentials. */
  get required(): boolean {
    return this.cfg.mode !== 'none';
  }

  /** The OAuth authorization servers for the protected resource metadata (jwt mode). */
  get authorizationServers(): string[] {
    return this.cfg.mode === 'jwt' ? [this.cfg.issuer] : [];
  }

  /** Scopes advertised in the protected resource metadata. */
  get scopes(): string[] {
    return this.cfg.mode === 'jwt' ? this.cfg.requiredScopes : [];
  }

  /**
   * Finds the caller from the `Authorization` header: at once without authentication and with API
   * keys, as a promise when a JWT is checked (its key set may have to be fetched).
   * @throws AuthError 401 for missing, malformed, unknown, expired or otherwise invalid credentials;
   *   403 when a JWT lacks a required scope (the promise rejects with it in JWT mode).
   *   AuthUnavailable when the `auth.jwksUrl` key set cannot be fetched (the token could not be
   *   checked).
   */
  authenticate(authorization: string | null | undefined): Caller | Promise<Caller> {
    if (this.cfg.mode === 'none') {
      const token = authorization ? bearer(authorization) : undefined;
      return { principal: ANONYMOUS, token };
    }
    const token = bearer(authorization);
    if (!token) throw new AuthError(401, 'Authentication required: send Authorization: Bearer <token>');
    if (this.cfg.mode === 'apiKeys') {
      const h = sha256(token);
      const match = this.keys.find((k) => timingSafeEqual(k.hash, h));
      if (!match) throw new AuthError(401, 'Unknown API key', 'invalid_token');
      return { principal: `apikey:${match.principal}`, token };
    }
    return this.verifyJwt(token, this.cfg);
  }

  /** The caller of a JWT (jwt mode); see {@link authenticate}. */
  private async verifyJwt(token: string, cfg: Extract<GatewayConfig['auth'], { mode: 'jwt' }>): Promise<Caller> {
    let payload;
    try {
      ({ payload } = await verifyAgainstKeySet(token, this.jwks!, {
        issuer: cfg.issuer,
        audience: cfg.audience,
        clockTolerance: cfg.clockToleranceSec,
        // jose checks exp only when it is there; an access token without it would never expire (RFC 9068 §2.2 requires it).
        requiredClaims: ['exp'],
      }));
    } catch (e) {
      // A fetch that failed (no jose code: the connection was refused or reset) or timed out, or a key set that is no JSON Web Key Set.
      if (cfg.jwksUrl && (!(e instanceof joseErrors.JOSEError) || JWKS_UNAVAILABLE.has(e.code))) {
        throw new AuthUnavailable(`the issuer's keys could not be fetched from auth.jwksUrl (${(e as Error).message})`);
      }
      const code = (e as { code?: string }).code ?? 'ERR_JWT_INVALID';
      const why =
        code === 'ERR_JWT_EXPIRED'
          ? 'the token has expired'
          : code === 'ERR_JWT_CLAIM_VALIDATION_FAILED'
            ? (e as { reason?: string }).reason === 'missing'
              ? `the token has no ${(e as { claim?: string }).claim ?? 'required'} claim`
              : `claim check failed (${(e as { claim?: string }).claim ?? 'claim'})`
            : code === 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED'
              ? 'the signature does not verify against the issuer keys'
              : code === 'ERR_JWKS_NO_MATCHING_KEY'
                ? "no key of the issuer matches the token's kid and alg"
                : 'the token is not a valid JWT';
      throw new AuthError(401, `Invalid access token: ${why}`, 'invalid_token');
    }
    if (typeof payload.sub !== 'string' || !payload.sub) throw new AuthError(401, 'Invalid access token: no sub claim', 'invalid_token');
    const granted = new Set<string>(
      typeof payload.scope === 'string'
        ? payload.scope.split(' ')
        : Array.isArray(payload.scp)
          ? (payload.scp as unknown[]).map(String)
          : [],
    );
    const missing = cfg.requiredScopes.filter((s) => !granted.has(s));
    if (missing.length)
      throw new AuthError(
        403,
        `The access token lacks the scope(s): ${missing.join(' ')}`,
        'insufficient_scope',
        cfg.requiredScopes.join(' '),
      );
    return { principal: `${payload.iss}#${payload.sub}`, token };
  }
}
