/**
 * Who may call: JWT (OAuth 2.1 resource server against a JWKS served here on 127.0.0.1), API keys,
 * principal binding of requestState and tasks, Host/Origin checks, and the RFC 9728 metadata.
 */
import { createHash } from 'node:crypto';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { envelope, memoryLogger, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually, FixtureLog, fixtureStdio } from '../helpers/fixture.js';
import { scaled } from '../helpers/budget.js';

const ISSUER = 'https://issuer.test';
const AUDIENCE = 'mrtr-gateway';

async function post(
  url: string,
  method: string,
  params: Record<string, unknown>,
  headers: Record<string, string> = {},
  caps: Record<string, unknown> = {},
) {
  const name = (params.name ?? params.taskId) as string | undefined;
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': method,
      ...(name ? { 'mcp-name': name } : {}),
      ...headers,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: { ...params, _meta: envelope(caps) } }),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as any };
}

describe('JWT auth', () => {
  let jwks: Server;
  let gw: TestGateway;
  let key: CryptoKey;
  let otherKey: CryptoKey;
  let url: string;
  let jwksBody: string;

  const token = (
    claims: Record<string, unknown> = {},
    opts: { key?: CryptoKey; exp?: string | number | null; iss?: string; aud?: string } = {},
  ) => {
    const jwt = new SignJWT({ scope: 'mcp', ...claims })
      .setProtectedHeader({ alg: 'RS256', kid: 'k1' })
      .setIssuer(opts.iss ?? ISSUER)
      .setAudience(opts.aud ?? AUDIENCE)
      .setSubject('alice')
      .setIssuedAt();
    if (opts.exp !== null) jwt.setExpirationTime(opts.exp ?? '5m');
    return jwt.sign(opts.key ?? key);
  };

  beforeAll(async () => {
    const pair = await generateKeyPair('RS256', { extractable: true });
    key = pair.privateKey;
    otherKey = (await generateKeyPair('RS256')).privateKey;
    const jwk = { ...(await exportJWK(pair.publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' };
    jwksBody = JSON.stringify({ keys: [jwk] });
    jwks = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(jwksBody));
    await new Promise<void>((r) => jwks.listen(0, '127.0.0.1', r));
    const jwksUrl = `http://127.0.0.1:${(jwks.address() as AddressInfo).port}/jwks.json`;
    gw = await startGateway({
      auth: { mode: 'jwt', issuer: ISSUER, audience: AUDIENCE, jwksUrl, requiredScopes: ['mcp'] },
      upstreams: { f: fixtureStdio() },
    });
    url = gw.url('f');
  });
  afterAll(async () => {
    await gw?.close();
    await new Promise((r) => jwks?.close(r));
  });

  it('a valid token is served', async () => {
    const r = await post(url, 'tools/list', {}, { authorization: `Bearer ${await token()}` });
    expect(r.status).toBe(200);
    expect(r.body.result.tools.length).toBeGreaterThan(0);
  });

  const rejected: [string, () => Promise<Record<string, string>>][] = [
    ['a missing token', async () => ({})],
    ['an expired token', async () => ({ authorization: `Bearer ${await token({}, { exp: Math.floor(Date.now() / 1000) - 600 })}` })],
    ['a wrong audience', async () => ({ authorization: `Bearer ${await token({}, { aud: 'someone-else' })}` })],
    ['a wrong issuer', async () => ({ authorization: `Bearer ${await token({}, { iss: 'https://evil.test' })}` })],
    ['a bad signature', async () => ({ authorization: `Bearer ${await token({}, { key: otherKey })}` })],
    ['a token without exp (one that would never expire)', async () => ({ authorization: `Bearer ${await token({}, { exp: null })}` })],
  ];
  it.each(rejected)('%s gets 401 with WWW-Authenticate resource_metadata', async (_label, headers) => {
    const r = await post(url, 'tools/list', {}, await headers());
    expect(r.status).toBe(401);
    const www = r.headers.get('www-authenticate')!;
    expect(www).toMatch(/^Bearer /);
    expect(www).toContain(`resource_metadata="${gw.base}/.well-known/oauth-protected-resource/mcp/f"`);
    expect(r.body.error.message.length).toBeGreaterThan(5);
  });

  it('a token without exp is refused for that reason', async () => {
    const r = await post(url, 'tools/list', {}, { authorization: `Bearer ${await token({}, { exp: null })}` });
    expect(r.status).toBe(401);
    expect(r.body.error.message).toBe('Invalid access token: the token has no exp claim');
  });

  it('a token without the required scope gets 403 insufficient_scope', async () => {
    const r = await post(url, 'tools/list', {}, { authorization: `Bearer ${await token({ scope: 'other' })}` });
    expect(r.status).toBe(403);
    expect(r.headers.get('www-authenticate')).toContain('error="insufficient_scope"');
  });

  it('serves RFC 9728 protected resource metadata per upstream', async () => {
    const res = await fetch(`${gw.base}/.well-known/oauth-protected-resource/mcp/f`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({
      resource: `${gw.base}/mcp/f`,
      authorization_servers: [ISSUER],
      bearer_methods_supported: ['header'],
      scopes_supported: ['mcp'],
    });
    expect((await fetch(`${gw.base}/.well-known/oauth-protected-resource/mcp/nope`)).status).toBe(404);
  });

  it('a JWKS with two keys under one kid (a rotation): a token signed by either is served, one signed by neither gets 401 for its signature', async () => {
    const next = await generateKeyPair('RS256', { extractable: true });
    const both = JSON.stringify({
      keys: [...JSON.parse(jwksBody).keys, { ...(await exportJWK(next.publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' }],
    });
    const two = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(both));
    await new Promise<void>((r) => two.listen(0, '127.0.0.1', r));
    const g = await startGateway({
      auth: {
        mode: 'jwt',
        issuer: ISSUER,
        audience: AUDIENCE,
        jwksUrl: `http://127.0.0.1:${(two.address() as AddressInfo).port}/jwks.json`,
        requiredScopes: ['mcp'],
      },
      upstreams: { f: fixtureStdio() },
    });
    try {
      for (const k of [key, next.privateKey]) {
        const r = await post(g.url('f'), 'tools/list', {}, { authorization: `Bearer ${await token({}, { key: k })}` });
        expect(r.status, JSON.stringify(r.body)).toBe(200);
      }
      const bad = await post(g.url('f'), 'tools/list', {}, { authorization: `Bearer ${await token({}, { key: otherKey })}` });
      expect(bad.status).toBe(401);
      expect(bad.body.error.message).toBe('Invalid access token: the signature does not verify against the issuer keys');
      const expired = await post(
        g.url('f'),
        'tools/list',
        {},
        { authorization: `Bearer ${await token({}, { key: next.privateKey, exp: Math.floor(Date.now() / 1000) - 600 })}` },
      );
      expect(expired.status).toBe(401);
      expect(expired.body.error.message).toBe('Invalid access token: the token has expired');
    } finally {
      await g.close();
      two.closeAllConnections();
      await new Promise((r) => two.close(r));
    }
  });

  it('a JWKS that cannot be fetched: a valid token gets 503 / -32603 with Retry-After (not a 401), logged at warn; served again once the JWKS answers', async () => {
    // A second gateway whose JWKS endpoint first refuses connections, then answers 500, then serves the keys.
    let mode: 'down' | 'error' | 'up' = 'down';
    const jwk = jwksBody;
    const flaky = createServer((_req, res) =>
      mode === 'error' ? res.writeHead(500).end('oops') : res.writeHead(200, { 'content-type': 'application/json' }).end(jwk),
    );
    await new Promise<void>((r) => flaky.listen(0, '127.0.0.1', r));
    const port = (flaky.address() as AddressInfo).port;
    await new Promise((r) => flaky.close(r));
    const mem = memoryLogger('info');
    const g = await startGateway(
      {
        auth: { mode: 'jwt', issuer: ISSUER, audience: AUDIENCE, jwksUrl: `http://127.0.0.1:${port}/jwks.json`, requiredScopes: ['mcp'] },
        upstreams: { f: fixtureStdio() },
      },
      { log: mem.log },
    );
    try {
      const t = await token();
      const down = await post(g.url('f'), 'tools/list', {}, { authorization: `Bearer ${t}` });
      expect(down.status).toBe(503);
      expect(down.headers.get('retry-after')).toBe('5');
      expect(down.headers.get('www-authenticate')).toBeNull();
      expect(down.body.error).toMatchObject({
        code: -32603,
        message: expect.stringContaining("the issuer's keys could not be fetched from auth.jwksUrl"),
      });
      expect(mem.lines().filter((l) => l.level === 40 && /issuer keys cannot be fetched/.test(l.msg))).toHaveLength(1);
      await new Promise<void>((r) => flaky.listen(port, '127.0.0.1', r));
      mode = 'error';
      expect((await post(g.url('f'), 'tools/list', {}, { authorization: `Bearer ${t}` })).status).toBe(503);
      mode = 'up';
      const served = await post(g.url('f'), 'tools/list', {}, { authorization: `Bearer ${t}` });
      expect(served.status, JSON.stringify(served.body)).toBe(200);
      // A bad token is still the client's problem.
      expect((await post(g.url('f'), 'tools/list', {}, { authorization: `Bearer ${await token({}, { key: otherKey })}` })).status).toBe(
        401,
      );
    } finally {
      await g.close();
      flaky.closeAllConnections();
      await new Promise((r) => flaky.close(r));
    }
  });
});

describe('JWT auth: a client that goes away while its token is checked', () => {
  let jwks: Server;
  let gw: TestGateway;
  let key: CryptoKey;
  const log = new FixtureLog();

  const token = () =>
    new SignJWT({ scope: 'mcp' })
      .setProtectedHeader({ alg: 'RS256', kid: 'k1' })
      .setIssuer(ISSUER)
      .setAudience(AUDIENCE)
      .setSubject('carol')
      .setIssuedAt()
      .setExpirationTime('5m')
      .sign(key);

  /** Sends `head` and `body` on a new connection and closes it at once, without waiting for an answer; resolves when the connection is closed. */
  const sendAndLeave = (head: string, body: string) =>
    new Promise<void>((resolve) => {
      const socket = connect(Number(new URL(gw.base).port), '127.0.0.1', () => socket.end(head + body));
      socket.on('error', () => {});
      socket.on('close', () => resolve());
      socket.resume();
    });
  const headOf = async (length: number) =>
    `POST /mcp/f HTTP/1.1\r\nHost: ${new URL(gw.base).host}\r\nAuthorization: Bearer ${await token()}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: slow\r\nContent-Length: ${length}\r\n\r\n`;

  beforeAll(async () => {
    const pair = await generateKeyPair('RS256', { extractable: true });
    key = pair.privateKey;
    const body = JSON.stringify({ keys: [{ ...(await exportJWK(pair.publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' }] });
    jwks = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(body));
    await new Promise<void>((r) => jwks.listen(0, '127.0.0.1', r));
    gw = await startGateway({
      auth: {
        mode: 'jwt',
        issuer: ISSUER,
        audience: AUDIENCE,
        jwksUrl: `http://127.0.0.1:${(jwks.address() as AddressInfo).port}/jwks.json`,
        requiredScopes: ['mcp'],
      },
      limits: { maxConcurrentPerPrincipal: 2 },
      upstreams: { f: fixtureStdio(log) },
    });
    // The keys are fetched and the upstream started before the connections below.
    expect((await post(gw.url('f'), 'tools/list', {}, { authorization: `Bearer ${await token()}` })).status).toBe(200);
  });
  afterAll(async () => {
    await gw?.close();
    await new Promise((r) => jwks?.close(r));
  });

  it('closing before the body arrived gives the concurrency slot back: after 5 such requests (limit 2) the principal is still served', async () => {
    for (let i = 0; i < 5; i++) await sendAndLeave(await headOf(120), '{"jsonrpc":');
    const r = await post(gw.url('f'), 'tools/list', {}, { authorization: `Bearer ${await token()}` });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  });

  it('closing right after a whole tools/call: the call does not run to its end upstream (never sent, or cancelled)', async () => {
    const body = JSON.stringify({
      jsonrpc: '2.0',
      id: 7,
      method: 'tools/call',
      params: { name: 'slow', arguments: { ms: 1500, steps: 3 }, _meta: envelope() },
    });
    const before = log.of('call', 'slow').length;
    for (let i = 0; i < 3; i++) await sendAndLeave(await headOf(Buffer.byteLength(body)), body);
    // Long enough for a call that was sent to have run to its end.
    await new Promise((r) => setTimeout(r, 2500));
    const started = log
      .of('call', 'slow')
      .slice(before)
      .map((e) => e.requestId);
    const cancelled = new Set(log.of('cancelled', 'slow').map((e) => e.requestId));
    expect(started.filter((id) => !cancelled.has(id))).toEqual([]);
    const r = await post(gw.url('f'), 'tools/list', {}, { authorization: `Bearer ${await token()}` });
    expect(r.status).toBe(200);
  });
});

describe('principal binding (API keys)', () => {
  let gw: TestGateway;
  let url: string;
  const A = { authorization: 'Bearer key-of-alice-0123456789' };
  const B = { authorization: 'Bearer key-of-bob-0123456789ab' };
  const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} }, elicitation: {} };

  beforeAll(async () => {
    gw = await startGateway({
      auth: {
        mode: 'apiKeys',
        keys: [
          { principal: 'alice', sha256: createHash('sha256').update('key-of-alice-0123456789').digest('hex') },
          { principal: 'bob', key: 'key-of-bob-0123456789ab' },
        ],
      },
      upstreams: { f: { ...fixtureStdio(), tasks: { taskAfterMs: 100 } } },
    });
    url = gw.url('f');
  });
  afterAll(() => gw?.close());

  it('an unknown key gets 401', async () => {
    const r = await post(url, 'tools/list', {}, { authorization: 'Bearer not-a-key-at-all-xyz' });
    expect(r.status).toBe(401);
    expect(r.headers.get('www-authenticate')).toContain('resource_metadata=');
  });

  it("B cannot use A's requestState: -32602, A's parked call is untouched and A completes", async () => {
    const first = await post(url, 'tools/call', { name: 'ask_name', arguments: {} }, A, { elicitation: {} });
    expect(first.body.result.resultType).toBe('input_required');
    const retry = { name: 'ask_name', arguments: {}, requestState: first.body.result.requestState };
    const stolen = await post(
      url,
      'tools/call',
      { ...retry, inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Mallory' } } } },
      B,
      { elicitation: {} },
    );
    expect(stolen.body.error.code).toBe(-32602);
    const mine = await post(
      url,
      'tools/call',
      { ...retry, inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Alice' } } } },
      A,
      { elicitation: {} },
    );
    expect(mine.body.result.content[0].text).toBe('Hello, Alice!');
  });

  it("B cannot see, answer or cancel A's task: -32602 like an unknown id, and A's task completes", async () => {
    const created = await post(url, 'tools/call', { name: 'slow_then_ask', arguments: { ms: 300 } }, A, TASKS);
    const { taskId } = created.body.result;
    expect(created.body.result.resultType).toBe('task');
    const unknown = await post(url, 'tasks/get', { taskId: 'AAAAAAAAAAAAAAAAAAAAAA' }, B, TASKS);
    for (const [m, extra] of [
      ['tasks/get', {}],
      ['tasks/update', { inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Bob' } } } }],
      ['tasks/cancel', {}],
    ] as const) {
      const r = await post(url, m, { taskId, ...extra }, B, TASKS);
      expect(r.body.error.code, m).toBe(-32602);
      expect(r.body.error.message).toBe(unknown.body.error.message);
    }
    let t: any;
    for (let i = 0; i < 50; i++) {
      t = (await post(url, 'tasks/get', { taskId }, A, TASKS)).body.result;
      if (t.status === 'input_required') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(t.status).toBe('input_required');
    await post(
      url,
      'tasks/update',
      { taskId, inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Alice' } } } },
      A,
      TASKS,
    );
    for (let i = 0; i < 50; i++) {
      t = (await post(url, 'tasks/get', { taskId }, A, TASKS)).body.result;
      if (t.status === 'completed') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(t.result.content[0].text).toBe('Report signed by Alice');
  });
});

/** GET `path` of `base` with node:http and this `Host` header (fetch does not let a caller set Host). */
function getWithHost(base: string, path: string, host: string): Promise<{ status: number; vary: string | undefined; body: string }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: u.hostname, port: u.port, path, headers: { host } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode!, vary: res.headers.vary, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('Host and Origin checks', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({ upstreams: { f: fixtureStdio() } });
  });
  afterAll(() => gw?.close());

  it('a foreign Origin gets 403', async () => {
    const r = await post(gw.url('f'), 'tools/list', {}, { origin: 'https://evil.example' });
    expect(r.status).toBe(403);
    expect(r.body.error.message).toContain('Origin');
  });

  it('a loopback Origin is served', async () => {
    const r = await post(gw.url('f'), 'tools/list', {}, { origin: 'http://localhost:3000' });
    expect(r.status).toBe(200);
  });

  it('a foreign Host header (DNS rebinding) gets 403', async () => {
    const { request } = await import('node:http');
    const u = new URL(gw.url('f'));
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(
        {
          host: u.hostname,
          port: u.port,
          path: u.pathname,
          method: 'POST',
          headers: { host: 'evil.example:80', 'content-type': 'application/json' },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode!);
        },
      );
      req.on('error', reject);
      req.end('{}');
    });
    expect(status).toBe(403);
  });

  it('the protected resource metadata is refused to a foreign Host (it would name that host as the resource), and served with Vary: Host', async () => {
    const u = new URL(gw.url('f'));
    const get = (host: string) => getWithHost(gw.base, '/.well-known/oauth-protected-resource/mcp/f', host);
    const forged = await get('evil.example');
    expect(forged.status).toBe(403);
    expect(JSON.parse(forged.body).error).toMatchObject({ code: -32600, message: "Forbidden: Host 'evil.example' is not allowed" });
    expect(forged.body).not.toContain('evil.example/mcp');
    expect(forged.vary).toMatch(/\bHost\b/);
    const served = await get(u.host);
    expect(served.status).toBe(200);
    expect(JSON.parse(served.body).resource).toBe(`http://${u.host}/mcp/f`);
    expect(served.vary).toMatch(/\bHost\b/);
  });

  it('a 404 names the served endpoints only to an allowed Host', async () => {
    const u = new URL(gw.url('f'));
    const get = (host: string) => getWithHost(gw.base, '/nothing-here', host);
    const forged = await get('evil.example');
    expect(forged.status).toBe(404);
    expect(JSON.parse(forged.body).error.message).toBe('No endpoint at /nothing-here');
    const allowed = await get(u.host);
    expect(JSON.parse(allowed.body).error.message).toBe('No endpoint at /nothing-here; this gateway serves /mcp/f');
  });
});

describe('fairness between principals', () => {
  const TWO_KEYS = {
    mode: 'apiKeys',
    keys: [
      { principal: 'alice', key: 'key-of-alice-0123456789' },
      { principal: 'bob', key: 'key-of-bob-0123456789ab' },
    ],
  };
  const A = { authorization: 'Bearer key-of-alice-0123456789' };
  const B = { authorization: 'Bearer key-of-bob-0123456789ab' };
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({
      auth: TWO_KEYS,
      // The refused call's session is given back once the upstream has ended that call, which on a
      // loaded machine takes more than a moment: alice's plain call may wait for it.
      upstreams: { f: { ...fixtureStdio(), maxSessions: 4, maxSessionsPerPrincipal: 2, timeouts: { queueMs: 10_000 } } },
    });
  });
  afterAll(() => gw?.close());

  it('a principal parks at most half its maxSessionsPerPrincipal: the next eliciting call gets parked-limit at once, its plain calls and another principal are still served', async () => {
    const first = await post(gw.url('f'), 'tools/call', { name: 'ask_name', arguments: {} }, A, { elicitation: {} });
    expect(first.body.result.resultType).toBe('input_required');
    const second = await post(gw.url('f'), 'tools/call', { name: 'ask_name', arguments: {} }, A, { elicitation: {} });
    expect(second.body.error).toMatchObject({ code: -32603, data: { upstream: 'f', reason: 'parked-limit' } });
    expect(second.body.error.message).toContain('maxParkedSessionsPerPrincipal=1');
    const alice = await post(gw.url('f'), 'tools/call', { name: 'slow', arguments: { ms: 10, steps: 1 } }, A);
    expect(alice.body.result.content[0].text).toBe('slept 10ms');
    const bobAsks = await post(gw.url('f'), 'tools/call', { name: 'ask_name', arguments: {} }, B, { elicitation: {} });
    expect(bobAsks.body.result.resultType).toBe('input_required');
    const bob = await post(gw.url('f'), 'tools/call', { name: 'slow', arguments: { ms: 10, steps: 1 } }, B);
    expect(bob.body.result.content[0].text).toBe('slept 10ms');
  });

  it(
    'a caller that finds every session held by another gets busy saying others may hold them and which bound to lower',
    async () => {
      const g = await startGateway({
        auth: TWO_KEYS,
        upstreams: { f: { ...fixtureStdio(), maxSessions: 2, maxSessionsPerPrincipal: 2, timeouts: { queueMs: 300 } } },
      });
      try {
        await post(g.url('f'), 'tools/list', {}, B);
        const held = [0, 1].map(() => post(g.url('f'), 'tools/call', { name: 'slow', arguments: { ms: 6000, steps: 1 } }, A));
        // Both of alice's calls hold a started session.
        const pool = g.gateway.upstreams.get('f')!.pool;
        expect(await eventually(() => pool.stats().leased === 2 && pool.stats().starting === 0, 10_000)).toBe(true);
        const bob = await post(g.url('f'), 'tools/call', { name: 'slow', arguments: { ms: 10, steps: 1 } }, B);
        expect(bob.body.error, JSON.stringify(bob.body)).toMatchObject({ code: -32603, data: { upstream: 'f', reason: 'busy' } });
        expect(bob.body.error.message).toBe(
          "All 2 sessions of upstream 'f' stayed busy for 300 ms, with calls in flight, parked waiting for input, running as tasks or holding subscriptions/listen streams, this caller's or others'; raise maxSessions (or lower maxSessionsPerPrincipal, so that one caller cannot hold them all) or retry later",
        );
        for (const r of await Promise.all(held)) expect(r.body.result.content[0].text).toBe('slept 6000ms');
      } finally {
        await g.close();
      }
    },
    scaled(30_000),
  );

  it('where maxSessionsPerPrincipal is not below maxSessions, one principal still parks only half of maxParkedSessions: another principal can park beside it', async () => {
    const g = await startGateway({
      auth: TWO_KEYS,
      // maxParkedSessions is half of maxSessions (4); alice alone must not take all 4.
      upstreams: { f: { ...fixtureStdio(), maxSessions: 8, maxSessionsPerPrincipal: 8, timeouts: { queueMs: 10_000 } } },
    });
    try {
      for (let i = 0; i < 2; i++) {
        const parked = await post(g.url('f'), 'tools/call', { name: 'ask_name', arguments: {} }, A, { elicitation: {} });
        expect(parked.body.result?.resultType, JSON.stringify(parked.body)).toBe('input_required');
      }
      const third = await post(g.url('f'), 'tools/call', { name: 'ask_name', arguments: {} }, A, { elicitation: {} });
      expect(third.body.error).toMatchObject({ code: -32603, data: { upstream: 'f', reason: 'parked-limit' } });
      expect(third.body.error.message).toContain('maxParkedSessionsPerPrincipal=2');
      for (let i = 0; i < 2; i++) {
        const bobAsks = await post(g.url('f'), 'tools/call', { name: 'ask_name', arguments: {} }, B, { elicitation: {} });
        expect(bobAsks.body.result?.resultType, JSON.stringify(bobAsks.body)).toBe('input_required');
      }
    } finally {
      await g.close();
    }
  });
});
