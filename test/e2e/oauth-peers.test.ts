/**
 * The OAuth peers the upstream credentials tests run against, proved without the gateway: an
 * oauth4webapi client discovers the authorization server from the protected upstream's 401 (RFC
 * 9728 → RFC 8414), registers (RFC 7591), gets a user's consent in headless chromium (code + PKCE
 * S256), calls the upstream with the token, refreshes it, exchanges caller JWTs (RFC 8693), and a
 * token for another audience is refused.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as oauth from 'oauth4webapi';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeWith } from '../helpers/installed.js';
import {
  callerIdp,
  closeBrowser,
  connectWithToken,
  consentInBrowser,
  protectedStdio,
  startOAuthPeers,
  JWT_TOKEN_TYPE,
  TOKEN_EXCHANGE,
  whoami,
  type AuthServer,
  type CallerIdp,
  type OAuthPeers,
  type ProtectedUpstream,
} from '../helpers/oauth.js';

const loopback = { [oauth.allowInsecureRequests]: true };

let peers: OAuthPeers;
let as: AuthServer;
let upstream: ProtectedUpstream;
let idp: CallerIdp;

beforeAll(async () => {
  peers = await startOAuthPeers({ accessTokenTtlSec: 120 });
  ({ idp, as, upstream } = peers);
});
afterAll(async () => peers?.close());

/** The token endpoint's RFC 8693 answer for `subjectToken` and `audience`. */
async function exchange(subjectToken: string, audience: string, metadata: oauth.AuthorizationServer, extra: Record<string, string> = {}) {
  const client = { client_id: as.exchangeClient.clientId };
  const res = await oauth.genericTokenEndpointRequest(
    metadata,
    client,
    oauth.ClientSecretBasic(as.exchangeClient.clientSecret),
    TOKEN_EXCHANGE,
    { subject_token: subjectToken, subject_token_type: JWT_TOKEN_TYPE, audience, ...extra },
    loopback,
  );
  return oauth.processGenericTokenEndpointResponse(metadata, client, res);
}

async function discover(): Promise<oauth.AuthorizationServer> {
  const issuer = new URL(as.issuer);
  return oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...loopback }));
}

describe('authorization server and protected upstream', () => {
  it('serves the same metadata at RFC 8414 and OpenID discovery, with the grants the tests use', async () => {
    const a = await (await fetch(`${as.issuer}/.well-known/oauth-authorization-server`)).json();
    const b = await (await fetch(`${as.issuer}/.well-known/openid-configuration`)).json();
    expect(a).toEqual(b);
    expect(a).toMatchObject({
      issuer: as.issuer,
      authorization_endpoint: as.authorizationEndpoint,
      token_endpoint: as.tokenEndpoint,
      registration_endpoint: as.registrationEndpoint,
      revocation_endpoint: as.revocationEndpoint,
      jwks_uri: as.jwksUri,
      code_challenge_methods_supported: ['S256'],
    });
    expect(a.grant_types_supported).toEqual(expect.arrayContaining(['authorization_code', 'refresh_token', TOKEN_EXCHANGE]));
  });

  it('answers 401 with RFC 9728 resource metadata without a token, and with invalid_token for a bad one', async () => {
    const init = {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: '{}',
    };
    const none = await fetch(upstream.url, init);
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toBe(`Bearer resource_metadata="${upstream.metadataUrl}"`);
    const bad = await fetch(upstream.url, { ...init, headers: { ...init.headers, authorization: 'Bearer not.a.jwt' } });
    expect(bad.status).toBe(401);
    expect(bad.headers.get('www-authenticate')).toMatch(/^Bearer error="invalid_token", error_description="[^"]*", resource_metadata="/);
    const meta = await (await fetch(upstream.metadataUrl)).json();
    expect(meta).toMatchObject({ resource: upstream.url, authorization_servers: [as.issuer], scopes_supported: ['mcp'] });
  });

  it('exchanges each caller JWT for a token of its own subject and the upstream audience', async () => {
    const metadata = await discover();
    as.clearRecords();
    upstream.clear();
    for (const who of ['bob', 'carol']) {
      const t = await exchange(await idp.mint(who), upstream.resource, metadata);
      expect(t.issued_token_type).toBe('urn:ietf:params:oauth:token-type:access_token');
      expect(decodeJwt(t.access_token)).toMatchObject({ iss: as.issuer, sub: who, aud: upstream.resource });
      const client = await connectWithToken(upstream.url, t.access_token);
      expect(await whoami(client)).toEqual({ sub: who, aud: upstream.resource });
      await client.close();
    }
    // An actor token (here a JWT of the same IdP) is named in the token's `act` claim.
    const acted = await exchange(await idp.mint('bob'), upstream.resource, metadata, {
      actor_token: await idp.mint('gateway'),
      actor_token_type: JWT_TOKEN_TYPE,
    });
    expect(decodeJwt(acted.access_token)).toMatchObject({ sub: 'bob', act: { sub: 'gateway' } });
    expect(as.records.exchanges.pop()).toMatchObject({ subject: 'bob', actor: 'gateway' });
    expect(as.records.exchanges.map((e) => [e.subject, e.audience])).toEqual([
      ['bob', upstream.resource],
      ['carol', upstream.resource],
    ]);
    expect(new Set(upstream.requests.map((r) => r.sub))).toEqual(new Set(['bob', 'carol']));
    expect(upstream.requests.every((r) => r.aud === upstream.resource && r.tokenExpMs > Date.now())).toBe(true);
  });

  it('refuses a forged or expired subject token with invalid_grant, and is unreachable while down', async () => {
    const metadata = await discover();
    const forged = await (await callerIdp()).mint('mallory');
    await expect(exchange(forged, upstream.resource, metadata)).rejects.toMatchObject({ error: 'invalid_grant' });
    await expect(exchange(await idp.mint('bob'), upstream.resource, metadata, { subject_token_type: 'x' })).rejects.toMatchObject({
      error: 'invalid_request',
    });
    await expect(exchange(await idp.mint('bob'), upstream.resource, metadata, { actor_token: forged })).rejects.toMatchObject({
      error: 'invalid_grant',
    });
    const expired = await idp.mint('bob', { ttlSec: -60 });
    await expect(exchange(expired, upstream.resource, metadata)).rejects.toMatchObject({ error: 'invalid_grant' });
    await as.down();
    await expect(fetch(as.tokenEndpoint, { method: 'POST' })).rejects.toThrow();
    await as.up();
    const t = await exchange(await idp.mint('bob'), upstream.resource, metadata);
    expect(decodeJwt(t.access_token).sub).toBe('bob');
  });

  it('refuses a token issued for another audience with 401 invalid_token', async () => {
    const metadata = await discover();
    const t = await exchange(await idp.mint('bob'), 'http://127.0.0.1:9/other', metadata);
    upstream.clear();
    await expect(connectWithToken(upstream.url, t.access_token)).rejects.toMatchObject({ code: 401 });
    expect(upstream.requests).toEqual([]);
    expect(upstream.refusals[0]).toMatchObject({ status: 401, reason: expect.stringMatching(/aud/) });
    // Told to accept that audience, it does; then its own again.
    upstream.setAudience('http://127.0.0.1:9/other');
    const other = await connectWithToken(upstream.url, t.access_token);
    expect(await whoami(other)).toEqual({ sub: 'bob', aud: 'http://127.0.0.1:9/other' });
    await other.close();
    upstream.setAudience();
    await expect(connectWithToken(upstream.url, t.access_token)).rejects.toMatchObject({ code: 401 });
  });
});

describe('stdio upstream with a token in its environment', () => {
  it('answers the token of its own variable, its subject and its pid', async () => {
    const token = await idp.mint('frank');
    const cfg = protectedStdio('UPSTREAM_TOKEN');
    const client = new Client({ name: 'oauth-peers', version: '1.0.0' });
    await client.connect(
      new StdioClientTransport({
        command: cfg.command,
        args: cfg.args,
        env: { ...process.env, UPSTREAM_TOKEN: token } as Record<string, string>,
        stderr: 'pipe',
      }),
    );
    try {
      const who = await whoami(client);
      expect(who).toMatchObject({ token, sub: 'frank', aud: idp.audience });
      expect(who.pid).toEqual(expect.any(Number));
      expect(who.pid).not.toBe(process.pid);
    } finally {
      await client.close();
    }
  });
});

describeWith(['chromium'], 'authorization code + PKCE through the login and consent pages (Debian chromium)', () => {
  let callback: Server;
  let redirectUri: string;

  beforeAll(async () => {
    callback = createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end('callback reached'));
    await new Promise<void>((r) => callback.listen(0, '127.0.0.1', r));
    redirectUri = `http://127.0.0.1:${(callback.address() as AddressInfo).port}/callback`;
  });
  afterAll(async () => {
    await closeBrowser();
    await new Promise((r) => callback?.close(r));
  });

  it('discovers from the 401, registers, gets consent, calls whoami as the user, and refreshes', async () => {
    // RFC 9728 from the challenge, then RFC 8414.
    const challenge = await fetch(upstream.url, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
    const metadataUrl = /resource_metadata="([^"]+)"/.exec(challenge.headers.get('www-authenticate') ?? '')?.[1];
    expect(metadataUrl).toBe(upstream.metadataUrl);
    const rs = await oauth.processResourceDiscoveryResponse(
      new URL(upstream.resource),
      await oauth.resourceDiscoveryRequest(new URL(upstream.resource), loopback),
    );
    const issuer = new URL(rs.authorization_servers![0]!);
    const metadata = await oauth.processDiscoveryResponse(
      issuer,
      await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...loopback }),
    );
    // RFC 7591: a public client.
    const client = await oauth.processDynamicClientRegistrationResponse(
      await oauth.dynamicClientRegistrationRequest(
        metadata,
        { redirect_uris: [redirectUri], token_endpoint_auth_method: 'none', grant_types: ['authorization_code', 'refresh_token'] },
        loopback,
      ),
    );
    expect(as.records.registrations.map((r) => r.clientId)).toContain(client.client_id);
    // Code + PKCE S256, the user signs in as alice in the browser.
    const verifier = oauth.generateRandomCodeVerifier();
    const state = oauth.generateRandomState();
    const authorize = new URL(metadata.authorization_endpoint!);
    authorize.search = new URLSearchParams({
      client_id: client.client_id,
      redirect_uri: redirectUri,
      response_type: 'code',
      scope: 'mcp',
      resource: upstream.resource,
      state,
      code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
    }).toString();
    const landed = await consentInBrowser(authorize.href, { login: 'alice' });
    expect(landed).toMatchObject({ status: 200, body: 'callback reached' });
    const params = oauth.validateAuthResponse(metadata, client, new URL(landed.url), state);
    const tokens = await oauth.processAuthorizationCodeResponse(
      metadata,
      client,
      await oauth.authorizationCodeGrantRequest(metadata, client, oauth.None(), params, redirectUri, verifier, {
        additionalParameters: { resource: upstream.resource },
        ...loopback,
      }),
    );
    expect(decodeJwt(tokens.access_token)).toMatchObject({ iss: as.issuer, sub: 'alice', aud: upstream.resource });
    expect(tokens.refresh_token).toBeTruthy();
    const mcp = await connectWithToken(upstream.url, tokens.access_token);
    expect(await whoami(mcp)).toEqual({ sub: 'alice', aud: upstream.resource });
    await mcp.close();
    expect(as.records.grants.at(-1)).toMatchObject({
      clientId: client.client_id,
      sub: 'alice',
      resource: upstream.resource,
      refreshToken: true,
    });
    // Refresh: a new access token for the same user and audience.
    const refreshed = await oauth.processRefreshTokenResponse(
      metadata,
      client,
      await oauth.refreshTokenGrantRequest(metadata, client, oauth.None(), tokens.refresh_token!, loopback),
    );
    expect(refreshed.access_token).not.toBe(tokens.access_token);
    expect(decodeJwt(refreshed.access_token)).toMatchObject({ sub: 'alice', aud: upstream.resource });
    expect(as.records.refreshes.at(-1)).toMatchObject({ sub: 'alice', resource: upstream.resource });
    const again = await connectWithToken(upstream.url, refreshed.access_token);
    expect(await whoami(again)).toEqual({ sub: 'alice', aud: upstream.resource });
    await again.close();
    // Revocation of the (opaque) refresh token.
    const revoked = await oauth.revocationRequest(metadata, client, oauth.None(), refreshed.refresh_token!, loopback);
    await oauth.processRevocationResponse(revoked);
    expect(as.records.revocations.at(-1)).toMatchObject({ clientId: client.client_id, kind: 'RefreshToken', sub: 'alice' });
    await expect(
      oauth
        .refreshTokenGrantRequest(metadata, client, oauth.None(), refreshed.refresh_token!, loopback)
        .then((r) => oauth.processRefreshTokenResponse(metadata, client, r)),
    ).rejects.toMatchObject({ error: 'invalid_grant' });
  });

  it('signs each user in through their own browser context; a refused refresh is invalid_grant', async () => {
    const metadata = await discover();
    // A confidential client (the registration default), asking no scope: it gets the default one.
    const client = await oauth.processDynamicClientRegistrationResponse(
      await oauth.dynamicClientRegistrationRequest(metadata, { redirect_uris: [redirectUri] }, loopback),
    );
    const auth = oauth.ClientSecretBasic(String(client.client_secret));
    const refreshTokens = new Map<string, string>();
    for (const login of ['dora', 'erin']) {
      const verifier = oauth.generateRandomCodeVerifier();
      const authorize = new URL(metadata.authorization_endpoint!);
      authorize.search = new URLSearchParams({
        client_id: client.client_id,
        redirect_uri: redirectUri,
        response_type: 'code',
        resource: upstream.resource,
        code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
        code_challenge_method: 'S256',
      }).toString();
      const landed = await consentInBrowser(authorize.href, { login });
      const params = oauth.validateAuthResponse(metadata, client, new URL(landed.url), oauth.expectNoState);
      const tokens = await oauth.processAuthorizationCodeResponse(
        metadata,
        client,
        await oauth.authorizationCodeGrantRequest(metadata, client, auth, params, redirectUri, verifier, loopback),
      );
      expect(decodeJwt(tokens.access_token)).toMatchObject({ sub: login, aud: upstream.resource, scope: 'mcp' });
      refreshTokens.set(login, tokens.refresh_token!);
    }
    const refresh = (login: string) =>
      oauth
        .refreshTokenGrantRequest(metadata, client, auth, refreshTokens.get(login)!, loopback)
        .then((r) => oauth.processRefreshTokenResponse(metadata, client, r));
    as.refuseRefresh('erin');
    await expect(refresh('erin')).rejects.toMatchObject({ error: 'invalid_grant' });
    expect(decodeJwt((await refresh('dora')).access_token).sub).toBe('dora');
  });

  it("lands on the server's error page for an unregistered redirect URI, on the client's with access_denied when the user cancels", async () => {
    const metadata = await discover();
    const client = await oauth.processDynamicClientRegistrationResponse(
      await oauth.dynamicClientRegistrationRequest(metadata, { redirect_uris: [redirectUri] }, loopback),
    );
    const authorize = new URL(metadata.authorization_endpoint!);
    authorize.search = new URLSearchParams({
      client_id: client.client_id,
      redirect_uri: `${redirectUri}/elsewhere`,
      response_type: 'code',
      code_challenge: await oauth.calculatePKCECodeChallenge(oauth.generateRandomCodeVerifier()),
      code_challenge_method: 'S256',
    }).toString();
    const landed = await consentInBrowser(authorize.href, { login: 'gus' });
    expect(landed.status).toBe(400);
    expect(landed.body).toMatch(/redirect_uri/);
    // The user cancels on the consent page: the client's redirect URI gets access_denied.
    authorize.searchParams.set('redirect_uri', redirectUri);
    authorize.searchParams.set('state', 'st');
    const denied = await consentInBrowser(authorize.href, { login: 'gus', deny: true });
    expect(denied).toMatchObject({ status: 200, body: 'callback reached' });
    expect(Object.fromEntries(new URL(denied.url).searchParams)).toMatchObject({ error: 'access_denied', state: 'st' });
  });
});
