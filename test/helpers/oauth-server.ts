/**
 * A real OAuth 2.1 authorization server for tests: panva's `oidc-provider` on 127.0.0.1 (port 0,
 * issuer = its URL) with authorization code + PKCE S256, its built-in login and consent pages
 * (devInteractions), refresh tokens, resource indicators (RFC 8707: JWT access tokens whose `aud`
 * is the requested `resource`), dynamic client registration (RFC 7591), RFC 8414 metadata,
 * revocation (RFC 7009) and RFC 8693 token exchange registered as a grant type.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { decodeJwt, exportJWK, generateKeyPair, type JSONWebKeySet } from 'jose';
import Provider from 'oidc-provider';
import { registerTokenExchange, TOKEN_EXCHANGE, type Exchange, type SubjectIssuer } from './oauth-exchange.js';

export { ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE, TOKEN_EXCHANGE, type Exchange, type SubjectIssuer } from './oauth-exchange.js';

/** A client registered with the server at start (besides any a test registers through RFC 7591). */
export interface PreRegisteredClient {
  clientId: string;
  /** Absent: a public client (`token_endpoint_auth_method: "none"`). */
  clientSecret?: string;
  /** Exact redirect URIs (authorization code clients). */
  redirectUris?: string[];
  /** Default: `authorization_code` and `refresh_token` with redirect URIs, else token exchange only. */
  grantTypes?: string[];
}

/** Options of {@link startAuthServer}. */
export interface AuthServerOptions {
  /** Access token lifetime in seconds for the authorization code and refresh grants (default 300). */
  accessTokenTtlSec?: number;
  /** Lifetime in seconds of tokens issued by the token exchange (default `accessTokenTtlSec`). */
  exchangeTtlSec?: number;
  /** Scopes the server knows besides `openid` and `offline_access` (default `["mcp"]`). */
  scopes?: string[];
  /** Clients registered at start. */
  clients?: PreRegisteredClient[];
  /** The confidential client that may use the token exchange (default `token-exchanger` / a random secret). */
  exchangeClient?: { clientId: string; clientSecret: string };
  /** Whose subject tokens the token exchange accepts (none: every exchange fails with `invalid_grant`). */
  subjectIssuer?: SubjectIssuer;
  /** The scope an authorization request that names none gets (default: `scopes` joined by spaces). */
  defaultScope?: string;
  /** Whether a refresh rotates the refresh token (default true). */
  rotateRefreshTokens?: boolean;
}

/** An authorization code or refresh grant the token endpoint answered. */
export interface IssuedGrant {
  clientId: string;
  /** The account id (the login name typed on the login page). */
  sub: string;
  /** The access token's audience (undefined: an opaque token without resource). */
  resource?: string;
  scope?: string;
  /** Whether a refresh token came with it. */
  refreshToken: boolean;
  atMs: number;
}

/** One revocation request that revoked a token (of the requesting client). */
export interface Revocation {
  clientId: string;
  kind: 'AccessToken' | 'RefreshToken' | 'ClientCredentials';
  sub?: string;
  atMs: number;
}

/** What the server did, in order, for the tests to read. */
export interface AuthServerRecords {
  /** Authorization code grants (code → tokens). */
  grants: IssuedGrant[];
  /** Refresh grants. */
  refreshes: IssuedGrant[];
  exchanges: Exchange[];
  revocations: Revocation[];
  /** Client ids registered through RFC 7591. */
  registrations: { clientId: string; redirectUris: string[] }[];
  /** Token endpoint requests that failed: `grant_type` and the OAuth `error` code. */
  tokenErrors: { grantType: string; error: string; atMs: number }[];
}

/** A running {@link startAuthServer}. */
export interface AuthServer {
  /** The issuer, `http://127.0.0.1:<port>` (no trailing slash). */
  issuer: string;
  /** `<issuer>/jwks`: the keys access tokens are signed with. */
  jwksUri: string;
  /** `<issuer>/token`. */
  tokenEndpoint: string;
  /** `<issuer>/auth`. */
  authorizationEndpoint: string;
  /** `<issuer>/reg` (RFC 7591, open registration). */
  registrationEndpoint: string;
  /** `<issuer>/token/revocation` (RFC 7009). */
  revocationEndpoint: string;
  /** The public keys (what `jwksUri` serves). */
  jwks: JSONWebKeySet;
  /** The confidential client allowed to use the token exchange. */
  exchangeClient: { clientId: string; clientSecret: string };
  records: AuthServerRecords;
  /**
   * From now on (`refuse` true, the default) refresh grants of account `sub` fail with
   * `invalid_grant` (as after the user revoked the grant at the server); `false` undoes it.
   */
  refuseRefresh(sub: string, refuse?: boolean): void;
  /** Empties every list of {@link records} (in place: references to the lists stay valid). */
  clearRecords(): void;
  /** Stops listening and drops open connections: the server is unreachable until {@link up}. */
  down(): Promise<void>;
  /** Listens again on the same port (state kept: clients, grants, keys). */
  up(): Promise<void>;
  close(): Promise<void>;
}

const RFC8414 = '/.well-known/oauth-authorization-server';

/**
 * Starts the authorization server on http://127.0.0.1:<port 0>. Login: any name and password (the
 * account id is the login name); consent: the "Continue" button. Access tokens for a `resource` are
 * RS256 JWTs (`iss`, `sub`, `aud` = resource, `exp`, `scope`, `client_id`); refresh tokens are issued
 * to every client allowed the `refresh_token` grant (no `offline_access` scope needed; clients
 * registered through RFC 7591 get `authorization_code` + `refresh_token` unless they ask otherwise).
 * An authorization request without `scope` gets `defaultScope`. JWT access tokens cannot be
 * revoked (`unsupported_token_type`, RFC 7009 §2.2.1); revoking a refresh token revokes its grant.
 * The token exchange (RFC 8693, client authentication required) answers `invalid_grant` for a
 * subject token that fails verification, `invalid_target` without `audience` or `resource`.
 */
export async function startAuthServer(opts: AuthServerOptions = {}): Promise<AuthServer> {
  const ttl = opts.accessTokenTtlSec ?? 300;
  const exchangeTtl = opts.exchangeTtlSec ?? ttl;
  const exchangeClient = opts.exchangeClient ?? { clientId: 'token-exchanger', clientSecret: randomBytes(16).toString('hex') };
  const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true });
  const kid = `as-${randomBytes(4).toString('hex')}`;
  const signingJwk = { ...(await exportJWK(privateKey)), kid, alg: 'RS256', use: 'sig' };
  const jwks: JSONWebKeySet = { keys: [{ ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' }] };

  const sockets = new Set<Socket>();
  let handler: (req: IncomingMessage, res: ServerResponse) => void = (_q, s) => s.writeHead(503).end();
  const defaultScope = opts.defaultScope ?? (opts.scopes ?? ['mcp']).join(' ');
  const server: Server = createServer((req, res) => {
    if (req.url?.startsWith(RFC8414)) req.url = '/.well-known/openid-configuration' + req.url.slice(RFC8414.length);
    if (req.method === 'GET' && req.url?.startsWith('/auth?') && !new URLSearchParams(req.url.slice(6)).has('scope')) {
      req.url += `&scope=${encodeURIComponent(defaultScope)}`;
    }
    handler(req, res);
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await listen(server, 0);
  const port = (server.address() as AddressInfo).port;
  const issuer = `http://127.0.0.1:${port}`;

  const records: AuthServerRecords = emptyRecords();
  const refused = new Set<string>();
  const provider = new Provider(
    issuer,
    configuration({ opts, ttl, signingJwk, exchangeClient, refused, cookieKey: randomBytes(32).toString('hex') }),
  );
  recordEvents(provider, records);
  registerTokenExchange(provider, { subjectIssuer: opts.subjectIssuer, ttl: exchangeTtl, ownJwks: jwks, issuer, records });
  handler = provider.callback();

  return {
    issuer,
    jwksUri: `${issuer}/jwks`,
    tokenEndpoint: `${issuer}/token`,
    authorizationEndpoint: `${issuer}/auth`,
    registrationEndpoint: `${issuer}/reg`,
    revocationEndpoint: `${issuer}/token/revocation`,
    jwks,
    exchangeClient,
    records,
    refuseRefresh: (sub, refuse = true) => void (refuse ? refused.add(sub) : refused.delete(sub)),
    clearRecords: () => {
      for (const list of Object.values(records)) list.length = 0;
    },
    down: () => stop(server, sockets),
    up: () => listen(server, port),
    close: () => (server.listening ? stop(server, sockets) : Promise.resolve()),
  };
}

function emptyRecords(): AuthServerRecords {
  return { grants: [], refreshes: [], exchanges: [], revocations: [], registrations: [], tokenErrors: [] };
}

function listen(server: Server, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
}

function stop(server: Server, sockets: Set<Socket>): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    for (const s of sockets) s.destroy();
    sockets.clear();
  });
}

function configuration(c: {
  opts: AuthServerOptions;
  ttl: number;
  signingJwk: Record<string, unknown>;
  exchangeClient: { clientId: string; clientSecret: string };
  refused: Set<string>;
  cookieKey: string;
}): Record<string, unknown> {
  const { opts, ttl } = c;
  const scopes = ['openid', 'offline_access', ...(opts.scopes ?? ['mcp'])];
  const clients = [...(opts.clients ?? []).map(clientMetadata), clientMetadata({ ...c.exchangeClient, grantTypes: [TOKEN_EXCHANGE] })];
  return {
    clients,
    jwks: { keys: [c.signingJwk] },
    cookies: { keys: [c.cookieKey] },
    scopes,
    // Any login name is an account, except for the refreshes refuseRefresh() turned off.
    findAccount: async (ctx: any, id: string) =>
      ctx?.oidc?.params?.grant_type === 'refresh_token' && c.refused.has(id)
        ? undefined
        : { accountId: id, claims: async () => ({ sub: id }) },
    clientDefaults: {
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: 'RS256',
    },
    pkce: { required: () => true },
    issueRefreshToken: async (_ctx: unknown, client: { grantTypeAllowed(t: string): boolean }) => client.grantTypeAllowed('refresh_token'),
    expiresWithSession: async () => false,
    // The RFC 8693 `act` claim of an exchange with an actor token (set by oauth-exchange.ts).
    extraTokenClaims: async (ctx: any) => (ctx?.state?.act ? { act: ctx.state.act } : undefined),
    rotateRefreshToken: () => opts.rotateRefreshTokens ?? true,
    features: {
      devInteractions: { enabled: true },
      registration: { enabled: true },
      revocation: {
        enabled: true,
        allowedPolicy: async (_ctx: unknown, client: { clientId: string }, token: { clientId?: string }) =>
          token.clientId === client.clientId,
      },
      introspection: { enabled: false },
      resourceIndicators: {
        enabled: true,
        defaultResource: async (_ctx: unknown, _client: unknown, oneOf?: string) => oneOf,
        useGrantedResource: async () => true,
        getResourceServerInfo: async (_ctx: unknown, resource: string) => ({
          audience: resource,
          scope: scopes.filter((s) => s !== 'openid' && s !== 'offline_access').join(' '),
          accessTokenTTL: ttl,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        }),
      },
    },
    ttl: {
      AccessToken: (_ctx: unknown, token: { resourceServer?: { accessTokenTTL?: number } }) => token.resourceServer?.accessTokenTTL ?? ttl,
      AuthorizationCode: 60,
      ClientCredentials: ttl,
      IdToken: 3600,
      Interaction: 600,
      Session: 3600,
      Grant: 86_400,
      RefreshToken: 86_400,
    },
    // oidc-provider renders its own error page; keep it plain text.
    renderError: async (ctx: any, out: Record<string, string>) => {
      ctx.type = 'text/plain';
      ctx.body = `${out.error}: ${out.error_description ?? ''}`;
    },
  };
}

function clientMetadata(c: PreRegisteredClient): Record<string, unknown> {
  const redirectUris = c.redirectUris ?? [];
  const grantTypes = c.grantTypes ?? (redirectUris.length ? ['authorization_code', 'refresh_token'] : [TOKEN_EXCHANGE]);
  return {
    client_id: c.clientId,
    ...(c.clientSecret
      ? { client_secret: c.clientSecret, token_endpoint_auth_method: 'client_secret_basic' }
      : { token_endpoint_auth_method: 'none' }),
    redirect_uris: redirectUris,
    grant_types: grantTypes,
    response_types: grantTypes.includes('authorization_code') ? ['code'] : [],
  };
}

function recordEvents(provider: Provider, records: AuthServerRecords): void {
  const now = () => Date.now();
  provider.on('grant.success', (ctx: any) => {
    const grantType: string = ctx.oidc.params.grant_type;
    if (grantType !== 'authorization_code' && grantType !== 'refresh_token') return;
    const source = ctx.oidc.entities.AuthorizationCode ?? ctx.oidc.entities.RefreshToken;
    const body = ctx.body as Record<string, unknown>;
    let resource: string | undefined;
    try {
      const aud = decodeJwt(String(body.access_token)).aud;
      resource = Array.isArray(aud) ? aud[0] : aud;
    } catch {
      resource = undefined;
    }
    const grant: IssuedGrant = {
      clientId: ctx.oidc.client.clientId,
      sub: source?.accountId,
      resource,
      scope: body.scope as string | undefined,
      refreshToken: typeof body.refresh_token === 'string',
      atMs: now(),
    };
    (grantType === 'authorization_code' ? records.grants : records.refreshes).push(grant);
  });
  provider.on('grant.error', (ctx: any, err: { error?: string }) => {
    records.tokenErrors.push({ grantType: String(ctx.oidc?.params?.grant_type), error: String(err.error), atMs: now() });
  });
  provider.on('registration_create.success', (_ctx: unknown, client: any) => {
    records.registrations.push({ clientId: client.clientId, redirectUris: [...(client.redirectUris ?? [])] });
  });
  provider.use(async (ctx, next) => {
    await next();
    if (ctx.oidc?.route !== 'revocation' || ctx.status !== 200) return;
    const e = ctx.oidc.entities;
    const token = e.RefreshToken ?? e.AccessToken ?? e.ClientCredentials;
    if (token && token.clientId === ctx.oidc.client.clientId)
      records.revocations.push({ clientId: ctx.oidc.client.clientId, kind: token.kind, sub: token.accountId, atMs: now() });
  });
}
