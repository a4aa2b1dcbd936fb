/**
 * Per-user OAuth grants on two replicas sharing a real Redis (docs/replicas.md, docs/security.md
 * "Upstream credentials"): the user consents through replica A's callback, and the retry of the
 * consent round, landing on replica B, runs there with the user's token.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startRedis, type TestRedis } from '../helpers/infra.js';
import { describeWith } from '../helpers/installed.js';
import { scaled } from '../helpers/budget.js';
import { consentInBrowser, startOAuthPeers, type CallerIdp, type OAuthPeers, type ProtectedUpstream } from '../helpers/oauth.js';

describeWith(['redis-server', 'chromium'], 'per-user OAuth grants on two replicas (Redis, Debian chromium)', () => {
  let redis: TestRedis;
  let peers: OAuthPeers;
  let idp: CallerIdp;
  let upstream: ProtectedUpstream;
  const replicas: TestGateway[] = [];

  beforeAll(async () => {
    redis = await startRedis();
    peers = await startOAuthPeers();
    ({ idp, upstream } = peers);
    const config = peers.gatewayConfig(
      { gh: peers.upstreamConfig('oauth', { protocol: 'legacy' }) },
      {
        store: { kind: 'redis', url: redis.url },
        replicas: { secret: 'replica-secret-0123456789abcdefghij', heartbeatMs: 200, deadAfterMs: 1000 },
        requestState: { keys: [{ kid: 'shared', secret: 'a-requestState-secret-both-replicas-share' }] },
        credentials: { keys: [{ kid: 'grants', secret: 'a-credentials-secret-both-replicas-share' }] },
      },
    );
    replicas.push(await startGateway(config), await startGateway(config));
  }, scaled(60_000));

  afterAll(async () => {
    for (const g of replicas) await g.close();
    await peers?.close();
    await redis?.stop();
  });

  it(
    'consent through replica A, the retry on replica B runs with the user token',
    async () => {
      const [a, b] = replicas as [TestGateway, TestGateway];
      const alice = await idp.mint('alice');
      const auth = { authorization: `Bearer ${alice}` };
      const caps = { elicitation: { url: {} } };
      const first = await rpc(a.url('gh'), 'tools/call', { name: 'whoami', arguments: {} }, { caps, headers: auth });
      expect(first.body.result).toMatchObject({ resultType: 'input_required' });
      const { url } = first.body.result.inputRequests.authorization.params;
      expect(url.startsWith(`${a.base}/oauth/start?`)).toBe(true);
      expect((await consentInBrowser(url, { login: 'alice' })).status).toBe(200);

      const params = {
        name: 'whoami',
        arguments: {},
        inputResponses: { authorization: { action: 'accept' } },
        requestState: first.body.result.requestState,
      };
      const retry = await rpc(b.url('gh'), 'tools/call', params, { caps, headers: auth });
      expect(retry.body.result).toMatchObject({ resultType: 'complete' });
      expect(JSON.parse(retry.body.result.content[0].text)).toEqual({ sub: 'alice', aud: upstream.resource });
      // Single use across replicas.
      const again = await rpc(a.url('gh'), 'tools/call', params, { caps, headers: auth });
      expect(again.body.error).toMatchObject({ code: -32602 });
    },
    scaled(60_000),
  );
});
