/**
 * Real OAuth peers for the per-user upstream credentials tests (docs/security.md, "Upstream
 * credentials"), all on 127.0.0.1:
 * - {@link startAuthServer}: an oidc-provider authorization server (code + PKCE, DCR, RFC 8414,
 *   resource indicators, revocation, RFC 8693 token exchange), test/helpers/oauth-server.ts and
 *   test/helpers/oauth-exchange.ts;
 * - {@link startProtectedUpstream}: a v1 SDK MCP server that verifies that server's tokens, and
 *   {@link protectedStdio}, its stdio counterpart, test/helpers/oauth-upstream.ts;
 * - {@link consentInBrowser}: a user signing in and consenting in headless chromium,
 *   test/helpers/oauth-browser.ts;
 * - {@link callerIdp}: the identity provider of the gateway's callers (JWTs the gateway's `jwt`
 *   auth accepts and the token exchange takes as subject tokens);
 * - {@link startOAuthPeers}: the three together, with the gateway config of an upstream per mode.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SignJWT, exportJWK, generateKeyPair, type JSONWebKeySet } from 'jose';
import { closeBrowser } from './oauth-browser.js';
import { startAuthServer, type AuthServer } from './oauth-server.js';
import { startProtectedUpstream, type ProtectedUpstream } from './oauth-upstream.js';

export * from './oauth-server.js';
export * from './oauth-upstream.js';
export * from './oauth-browser.js';

/** Options of {@link CallerIdp.mint}. */
export interface MintOptions {
  /** Lifetime in seconds (default 300; negative: already expired). */
  ttlSec?: number;
  /** `aud` instead of the IdP's audience. */
  audience?: string;
  /** Extra claims (default `{scope: "mcp"}`). */
  claims?: Record<string, unknown>;
}

/** A test identity provider for the gateway's callers. */
export interface CallerIdp {
  /** `iss` of the minted tokens. */
  issuer: string;
  /** Default `aud` of the minted tokens (the gateway's audience). */
  audience: string;
  /** The public keys (RS256, one key). */
  jwks: JSONWebKeySet;
  /** A file holding {@link jwks}, for the gateway's `auth.jwksFile`. */
  jwksFile: string;
  /** The gateway's `auth` config accepting these tokens: `{mode: "jwt", issuer, audience, jwksFile}`. */
  auth: { mode: 'jwt'; issuer: string; audience: string; jwksFile: string };
  /** A signed RS256 JWT with `sub`, `iss`, `aud`, `iat`, `exp` and a fresh `jti`. */
  mint(sub: string, opts?: MintOptions): Promise<string>;
}

/**
 * A caller IdP with a fresh RS256 key (issuer default `https://idp.test`, audience default
 * `mrtr-gateway`); its JWKS is written to a temporary file. Pass it as
 * `startAuthServer({subjectIssuer: idp})` so the token exchange accepts its tokens.
 */
export async function callerIdp(opts: { issuer?: string; audience?: string } = {}): Promise<CallerIdp> {
  const issuer = opts.issuer ?? 'https://idp.test';
  const audience = opts.audience ?? 'mrtr-gateway';
  const { privateKey, publicKey } = await generateKeyPair('RS256');
  const kid = `idp-${randomBytes(4).toString('hex')}`;
  const jwks: JSONWebKeySet = { keys: [{ ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' }] };
  const jwksFile = join(mkdtempSync(join(tmpdir(), 'caller-idp-')), 'jwks.json');
  writeFileSync(jwksFile, JSON.stringify(jwks));
  return {
    issuer,
    audience,
    jwks,
    jwksFile,
    auth: { mode: 'jwt', issuer, audience, jwksFile },
    mint: (sub, m = {}) => {
      const now = Math.floor(Date.now() / 1000);
      return new SignJWT({ scope: 'mcp', ...m.claims })
        .setProtectedHeader({ alg: 'RS256', kid, typ: 'JWT' })
        .setIssuer(issuer)
        .setAudience(m.audience ?? audience)
        .setSubject(sub)
        .setIssuedAt(now)
        .setJti(randomBytes(8).toString('hex'))
        .setExpirationTime(now + (m.ttlSec ?? 300))
        .sign(privateKey);
    },
  };
}

/** The `credentials.keys` of the test gateways (one key; the grants' and consent links' sealing). */
export const CREDENTIAL_KEYS = [{ kid: 'k1', secret: 'credentials-secret-of-at-least-32-characters' }];

/** The peers of a per-user credentials test, started by {@link startOAuthPeers}. */
export interface OAuthPeers {
  idp: CallerIdp;
  /** The authorization server; it accepts {@link idp}'s JWTs as token exchange subject tokens. */
  as: AuthServer;
  /** The protected upstream (v1 SDK over Streamable HTTP) that verifies {@link as}'s tokens. */
  upstream: ProtectedUpstream;
  /** The `credentials` of an upstream in `mode`: `{mode: "oauth"}`, or token exchange at {@link as} with its client. */
  credentials(mode: 'oauth' | 'tokenExchange'): Record<string, unknown>;
  /** The config of upstream {@link upstream} in `mode`, `extra` merged on top. */
  upstreamConfig(mode: 'oauth' | 'tokenExchange', extra?: Record<string, unknown>): Record<string, unknown>;
  /**
   * A gateway config: `auth` of {@link idp}, `credentials.keys` {@link CREDENTIAL_KEYS}, and
   * `upstreams`, `extra` merged on top (its `credentials` merged into the keys).
   */
  gatewayConfig(upstreams: Record<string, unknown>, extra?: Record<string, unknown>): Record<string, unknown>;
  /** Closes the browser of {@link consentInBrowser}, the upstream and the authorization server. */
  close(): Promise<void>;
}

/**
 * Starts a caller IdP, an authorization server trusting it (access tokens valid
 * `accessTokenTtlSec`, default the server's) and a protected upstream of that server.
 */
export async function startOAuthPeers(opts: { accessTokenTtlSec?: number } = {}): Promise<OAuthPeers> {
  const idp = await callerIdp();
  const as = await startAuthServer({ subjectIssuer: idp, ...opts });
  const upstream = await startProtectedUpstream({ issuer: as.issuer, jwksUri: as.jwksUri });
  const credentials = (mode: 'oauth' | 'tokenExchange') =>
    mode === 'oauth' ? { mode } : { mode, tokenEndpoint: as.tokenEndpoint, ...as.exchangeClient };
  return {
    idp,
    as,
    upstream,
    credentials,
    upstreamConfig: (mode, extra = {}) => ({ transport: 'streamable-http', url: upstream.url, credentials: credentials(mode), ...extra }),
    gatewayConfig: (upstreams, extra = {}) => ({
      auth: idp.auth,
      ...extra,
      credentials: { keys: CREDENTIAL_KEYS, ...(extra.credentials as Record<string, unknown> | undefined) },
      upstreams,
    }),
    close: async () => {
      await closeBrowser();
      await upstream.close();
      await as.close();
    },
  };
}
