/**
 * The OAuth client side's transport rule: plain http only for loopback hosts (oauth4webapi's
 * `allowInsecureRequests`), its failures as -32603 upstream-authorization, and which grant a
 * refused token drops.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { OAuthClients } from '../../src/credentials/oauth-client.js';
import { requestOptions } from '../../src/credentials/oauth-http.js';
import { TokenExchange } from '../../src/credentials/token-exchange.js';
import { Credentials } from '../../src/credentials/credentials.js';
import { OAuthGrants } from '../../src/credentials/grants.js';
import { ConsentRequired } from '../../src/credentials/types.js';
import { MemorySpentStates } from '../../src/store/shared.js';
import { silentLogger } from '../../src/observability/log.js';
import { GatewayError } from '../../src/protocol/errors.js';
import { SealedBox } from '../../src/security/sealed-box.js';
import { MemoryGrantStore } from '../../src/store/grants.js';
import * as oauth from 'oauth4webapi';
import { ROOT } from '../helpers/processes.js';

describe('requestOptions', () => {
  it('allows plain http for loopback hosts only', () => {
    for (const url of ['http://127.0.0.1:9/token', 'http://localhost/token', 'http://[::1]:8080/x'])
      expect(requestOptions(url)[oauth.allowInsecureRequests], url).toBe(true);
    for (const url of ['http://as.example/token', 'https://as.example/token', 'http://10.0.0.1/token'])
      expect(requestOptions(url)[oauth.allowInsecureRequests], url).toBeUndefined();
  });
});

/** A gateway config with one `tokenExchange` upstream `tx` whose token endpoint is `tokenEndpoint`. */
function exchangeConfig(tokenEndpoint: string) {
  return parseConfig(
    {
      auth: { mode: 'jwt', issuer: 'https://idp.test', audience: 'gw', jwksUrl: 'https://idp.test/jwks' },
      upstreams: {
        tx: { transport: 'streamable-http', url: 'https://api.example/mcp', credentials: { mode: 'tokenExchange', tokenEndpoint } },
      },
    },
    {},
    ROOT,
  );
}

describe('TokenExchange', () => {
  it('refuses a plain-http token endpoint on another host before sending anything, naming why', async () => {
    const cfg = exchangeConfig('http://as.example/token');
    const err = await new TokenExchange(cfg, silentLogger).token('tx', { principal: 'p', token: 'subject-jwt' }).catch((e) => e);
    expect(err).toBeInstanceOf(GatewayError);
    expect(err.code).toBe(-32603);
    expect(err.data).toEqual({ upstream: 'tx', reason: 'upstream-authorization' });
    expect(err.message).toBe(
      'The token endpoint http://as.example/token of upstream tx is not https (plain http is allowed for loopback hosts only)',
    );
    expect(err.message).not.toContain('subject-jwt');
  });

  it('asks for the caller’s token when none was presented', async () => {
    const cfg = exchangeConfig('https://as.example/token');
    const err = await new TokenExchange(cfg, silentLogger).token('tx', { principal: 'p' }).catch((e) => e);
    expect(err.data).toEqual({ upstream: 'tx', reason: 'upstream-authorization' });
    expect(err.message).toMatch(/needs the caller's access token/);
  });
});

describe('OAuthClients', () => {
  it('asks for credentials.clientId when the server offers no dynamic client registration', async () => {
    const clients = new OAuthClients(new MemoryGrantStore(), new SealedBox([{ kid: 'k', secret: 'x'.repeat(32) }]), silentLogger);
    const err = await clients
      .forUpstream(
        'up',
        { mode: 'oauth' },
        { as: { issuer: 'https://as.example' }, resource: 'https://api.example/mcp', scopes: [] },
        'https://gw.example/oauth/callback',
      )
      .catch((e) => e);
    expect(err).toBeInstanceOf(GatewayError);
    expect(err.data).toEqual({ upstream: 'up', reason: 'upstream-authorization' });
    expect(err.message).toBe(
      'The authorization server https://as.example of upstream up offers no dynamic client registration: register the gateway there (redirect URI https://gw.example/oauth/callback) and set credentials.clientId',
    );
  });

  it('uses the configured client as it is', async () => {
    const clients = new OAuthClients(new MemoryGrantStore(), new SealedBox([{ kid: 'k', secret: 'x'.repeat(32) }]), silentLogger);
    const target = { as: { issuer: 'https://as.example' }, resource: 'https://api.example/mcp', scopes: [] };
    expect(
      await clients.forUpstream('up', { mode: 'oauth', clientId: 'gw', clientSecret: 's' }, target, 'https://gw.example/oauth/callback'),
    ).toEqual({
      client_id: 'gw',
      client_secret: 's',
    });
  });
});

describe('Credentials.refused on an oauth upstream', () => {
  const KEY = { kid: 'k', secret: 'a-credentials-secret-of-at-least-32-chars' };
  const cfg = parseConfig(
    {
      auth: { mode: 'apiKeys', keys: [{ key: 'an-api-key-of-16-chars-or-more', principal: 'alice' }] },
      upstreams: { gh: { transport: 'streamable-http', url: 'https://api.example/mcp', credentials: { mode: 'oauth', clientId: 'c' } } },
    },
    {},
    ROOT,
  );
  const box = new SealedBox([KEY]);
  const store = new MemoryGrantStore();
  const grants = new OAuthGrants({
    cfg,
    store,
    spent: new MemorySpentStates(),
    box,
    log: silentLogger,
    listenUrl: () => 'http://127.0.0.1:1',
  });
  const credentials = new Credentials(cfg, new TokenExchange(cfg, silentLogger), grants);
  /** Stores `accessToken` as apikey:alice's grant for gh, valid for an hour. */
  const hold = (accessToken: string) =>
    store.put({
      upstream: 'gh',
      principal: 'apikey:alice',
      createdAtMs: Date.now(),
      expiresAtMs: Date.now() + 3_600_000,
      refreshable: false,
      sealed: box.seal(
        {
          accessToken,
          issuer: 'https://as.example',
          tokenEndpoint: 'https://as.example/token',
          clientId: 'c',
          resource: 'https://api.example/mcp',
        },
        'grant\ngh\napikey:alice',
      ),
    });

  it('drops the grant whose token the upstream refused, and keeps one refreshed since', async () => {
    await hold('token-1');
    const first = (await credentials.resolve('gh', { principal: 'apikey:alice' }))!;
    expect(first.headers.authorization).toBe('Bearer token-1');
    // Another request refreshed the grant before this refusal arrived: the new token stays.
    await hold('token-2');
    await credentials.refused('gh', 'apikey:alice', first);
    const second = (await credentials.resolve('gh', { principal: 'apikey:alice' }))!;
    expect(second.headers.authorization).toBe('Bearer token-2');
    // The refused token is the one held: the grant goes, and the caller is asked for consent.
    await credentials.refused('gh', 'apikey:alice', second);
    await expect(credentials.resolve('gh', { principal: 'apikey:alice' })).rejects.toBeInstanceOf(ConsentRequired);
  });
});
