/**
 * The OAuth client side's transport rule: plain http only for loopback hosts (oauth4webapi's
 * `allowInsecureRequests`), and its failures as -32603 upstream-authorization.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { requestOptions } from '../../src/credentials/oauth-http.js';
import { TokenExchange } from '../../src/credentials/token-exchange.js';
import { silentLogger } from '../../src/observability/log.js';
import { GatewayError } from '../../src/protocol/errors.js';
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

describe('TokenExchange', () => {
  it('refuses a plain-http token endpoint on another host before sending anything, naming why', async () => {
    const cfg = parseConfig(
      {
        auth: { mode: 'jwt', issuer: 'https://idp.test', audience: 'gw', jwksUrl: 'https://idp.test/jwks' },
        upstreams: {
          tx: {
            transport: 'streamable-http',
            url: 'https://api.example/mcp',
            credentials: { mode: 'tokenExchange', tokenEndpoint: 'http://as.example/token' },
          },
        },
      },
      {},
      ROOT,
    );
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
    const cfg = parseConfig(
      {
        auth: { mode: 'jwt', issuer: 'https://idp.test', audience: 'gw', jwksUrl: 'https://idp.test/jwks' },
        upstreams: {
          tx: {
            transport: 'streamable-http',
            url: 'https://api.example/mcp',
            credentials: { mode: 'tokenExchange', tokenEndpoint: 'https://as.example/token' },
          },
        },
      },
      {},
      ROOT,
    );
    const err = await new TokenExchange(cfg, silentLogger).token('tx', { principal: 'p' }).catch((e) => e);
    expect(err.data).toEqual({ upstream: 'tx', reason: 'upstream-authorization' });
    expect(err.message).toMatch(/needs the caller's access token/);
  });
});
