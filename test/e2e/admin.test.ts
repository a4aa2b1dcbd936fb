/**
 * The admin page and its JSON: off unless configured, behind the MCP endpoints' auth with its own
 * principals, and, in Debian's chromium (headless, driven by playwright-core), showing what an
 * operator needs while a call is parked, a task runs and a legacy client holds a session, with
 * everything an upstream chose (tool names, stderr) escaped. The page's screenshot is saved to
 * test-artifacts/admin.png (ignored by git).
 */
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { type Browser, type BrowserContext } from 'playwright-core';
import { launchChromium } from '../helpers/chromium.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { principalHash } from '../../src/security/auth.js';
import { fixtureStdio } from '../helpers/fixture.js';
import { createApp } from '../../src/http/app.js';
import { memoryLogger, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { ROOT } from '../helpers/processes.js';
import { scaled } from '../helpers/budget.js';
import { describeWith } from '../helpers/installed.js';

const ARTIFACTS = join(ROOT, 'test-artifacts');

const OPS_KEY = 'ops-key-0123456789abcdef';
const DEV_KEY = 'dev-key-0123456789abcdef';
const ops = { authorization: `Bearer ${OPS_KEY}` };
const dev = { authorization: `Bearer ${DEV_KEY}` };
const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} } };
const API = [
  '/admin/api/upstreams',
  '/admin/api/parked',
  '/admin/api/tasks',
  '/admin/api/sessions',
  '/admin/api/census',
  '/admin/api/dropped',
];

const get = (url: string, headers: Record<string, string> = {}) => fetch(url, { headers });

/** A tool name and a stderr line an upstream chose, meant to inject markup into the page. */
const HOSTILE_TOOL = `<script>document.title="pwned"</script><img src=x onerror=alert(1)>&amp;`;
const HOSTILE_STDERR = `fatal: </pre><script>document.title="pwned"</script><b onmouseover=alert(1)>bold</b>`;

describe('admin page: off unless configured', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({ upstreams: { f: fixtureStdio() } });
  });
  afterAll(() => gw?.close());

  it('GET /admin and /admin/api/* answer 404 by default', async () => {
    for (const path of ['/admin', ...API]) {
      const res = await get(gw.base + path);
      expect(res.status, path).toBe(404);
    }
  });
});

describe('admin page: access and JSON', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({
      auth: {
        mode: 'apiKeys',
        keys: [
          { principal: 'ops', key: OPS_KEY },
          { principal: 'dev', key: DEV_KEY },
        ],
      },
      admin: { enabled: true, principals: ['apikey:ops'] },
      upstreams: {
        f: fixtureStdio(),
        // Exits in the middle of a call (tool crash), then starts again.
        crashy: fixtureStdio(),
        // Cannot start: says why on stderr, with a secret of its configured env in the line.
        broken: {
          transport: 'stdio',
          protocol: 'legacy',
          command: process.execPath,
          args: ['-e', "console.error('fatal: cannot reach the database with ' + process.env.DB_TOKEN); process.exit(3)"],
          env: { DB_TOKEN: 'db-secret-token-123456' },
        },
      },
    });
  });
  afterAll(() => gw?.close());

  it('without credentials 401, with a principal not in admin.principals 403, with a listed one 200', async () => {
    for (const path of ['/admin', ...API]) {
      const none = await get(gw.base + path);
      expect(none.status, path).toBe(401);
      expect(none.headers.get('www-authenticate')).toMatch(/^Bearer realm="mrtr-gateway admin"/);
      const wrong = await get(gw.base + path, { authorization: 'Bearer not-a-key-0123456789' });
      expect(wrong.status, path).toBe(401);
      const refused = await get(gw.base + path, dev);
      expect(refused.status, path).toBe(403);
      expect(await refused.json()).toEqual({ error: expect.stringContaining('admin.principals') });
      const ok = await get(gw.base + path, ops);
      expect(ok.status, path).toBe(200);
      expect(ok.headers.get('cache-control')).toBe('no-store');
    }
  });

  it('the Host check of the MCP endpoints applies', async () => {
    const res = await fetch(`${gw.base}/admin/api/census`, { headers: { ...ops, origin: 'http://evil.example' } });
    expect(res.status).toBe(403);
  });

  it('the JSON APIs describe upstreams, parked calls, tasks, sessions and the census', async () => {
    const parked = await rpc(gw.url('f'), 'tools/call', { name: 'ask_name', arguments: {} }, { caps: { elicitation: {} }, headers: dev });
    expect(parked.body.result.resultType).toBe('input_required');

    const failed = await rpc(gw.url('broken'), 'tools/list', {}, { headers: dev });
    expect(failed.body.error.data.reason).toBe('unreachable');

    const json = async (path: string) => (await get(gw.base + path, ops)).json();
    const { upstreams } = await json('/admin/api/upstreams');
    expect(upstreams[0]).toEqual({
      name: 'f',
      transport: 'stdio',
      protocol: 'auto',
      era: 'legacy',
      revision: '2025-11-25',
      sessions: { total: 1, idle: 0, inUse: 1, waiting: 0 },
      legacySessions: 0,
      parked: 1,
      opened: 1,
      died: 0,
      restarts: 0,
      openFailures: 0,
      consecutiveFailures: 0,
      listCache: { hits: 0, misses: 0, entries: 0 },
    });
    expect(upstreams[2]).toMatchObject({
      name: 'broken',
      era: 'legacy',
      sessions: { total: 0 },
      opened: 0,
      restarts: 0,
      openFailures: 1,
      consecutiveFailures: 1,
    });
    expect(upstreams[2].revision).toBeUndefined();
    expect(upstreams[2].lastFailure).toEqual({
      at: expect.any(String),
      kind: 'open',
      message: expect.stringContaining('fatal: cannot reach the database with [redacted]'),
      stderr: ['fatal: cannot reach the database with [redacted]'],
    });
    const { parked: calls } = await json('/admin/api/parked');
    expect(calls).toEqual([
      {
        id: expect.any(String),
        upstream: 'f',
        method: 'tools/call',
        name: 'ask_name',
        principal: principalHash('apikey:dev'),
        round: 0,
        parkedAt: expect.any(String),
        expiresAt: expect.any(String),
        ageMs: expect.any(Number),
        timeLeftMs: expect.any(Number),
        inputs: [{ key: 'elicitation-1', kind: 'elicitation', mode: 'form' }],
      },
    ]);
    expect(Date.parse(calls[0].expiresAt) - Date.parse(calls[0].parkedAt)).toBe(600_000);
    expect(await json('/admin/api/tasks')).toEqual({
      counts: { working: 0, input_required: 0, completed: 0, failed: 0, cancelled: 0 },
      running: [],
    });
    expect(await json('/admin/api/sessions')).toEqual({ sessions: [] });
    const census = await json('/admin/api/census');
    expect(census.features).toContain('elicitation_form');
    expect(census.entries).toEqual([
      {
        upstream: 'f',
        tool: 'ask_name',
        feature: 'elicitation_form',
        calls: 1,
        firstSeen: expect.any(String),
        lastSeen: expect.any(String),
      },
    ]);
    expect(await json('/admin/api/dropped')).toEqual({ dropped: [] });

    for (const path of API) expect(JSON.stringify(await json(path)), path).not.toMatch(/apikey:|dev-key|ops-key|db-secret/);
  });

  it('a child that exits mid-call counts as died, and the next session as a restart', async () => {
    const crashed = await rpc(gw.url('crashy'), 'tools/call', { name: 'crash', arguments: {} }, { headers: dev });
    expect(crashed.body.error).toBeDefined();
    const again = await rpc(gw.url('crashy'), 'tools/call', { name: 'slow', arguments: { ms: 1, steps: 1 } }, { headers: dev });
    expect(again.body.result.resultType).toBe('complete');
    const { upstreams } = await (await get(`${gw.base}/admin/api/upstreams`, ops)).json();
    expect(upstreams[1]).toMatchObject({
      name: 'crashy',
      opened: 2,
      died: 1,
      restarts: 1,
      openFailures: 0,
      lastFailure: { kind: 'died', message: expect.any(String), stderr: expect.any(Array) },
    });
  });

  it('an unknown admin path is 404 and another method than GET 405 (after the access checks)', async () => {
    const unknown = await get(`${gw.base}/admin/api/nothing`, ops);
    expect(unknown.status).toBe(404);
    expect((await unknown.json()).error).toMatch(
      /^No admin endpoint at \/admin\/api\/nothing; the admin endpoints are \/admin, \/admin\/api\/upstreams/,
    );
    expect((await get(`${gw.base}/admin/`, ops)).status).toBe(404);
    expect((await get(`${gw.base}/admin/api/nothing`)).status).toBe(401);
    for (const [method, path] of [
      ['POST', '/admin'],
      ['DELETE', '/admin/api/census'],
      ['PUT', '/admin/api/parked'],
    ] as const) {
      const res = await fetch(gw.base + path, { method, headers: ops });
      expect(res.status, `${method} ${path}`).toBe(405);
      expect(res.headers.get('allow')).toBe('GET, HEAD');
      expect((await res.json()).error).toBe(`${method} is not supported on ${path}; use GET`);
    }
    expect((await fetch(`${gw.base}/admin`, { method: 'POST' })).status).toBe(401);
    const head = await fetch(`${gw.base}/admin/api/census`, { method: 'HEAD', headers: ops });
    expect(head.status).toBe(200);
  });
});

describe('admin page with auth.mode "none": loopback clients only', () => {
  let gw: TestGateway;
  const mem = memoryLogger('info');
  beforeAll(async () => {
    gw = await startGateway({ admin: { enabled: true }, upstreams: { f: fixtureStdio() } }, { log: mem.log });
  });
  afterAll(() => gw?.close());

  it('a client on 127.0.0.1 gets the page and the JSON', async () => {
    for (const path of ['/admin', ...API]) expect((await get(gw.base + path)).status, path).toBe(200);
  });

  it('a client from a non-loopback address gets 403 saying why (through the front door, the peer address given as the Node server would)', async () => {
    // This machine has no other network: the request goes through the real app, with the
    // connection's peer address set as @hono/node-server passes it (env.incoming.socket).
    const { app } = createApp(gw.gateway.deps);
    const from = (remoteAddress: string, path = '/admin') =>
      app.request(`http://127.0.0.1${path}`, { headers: { host: '127.0.0.1' } }, { incoming: { socket: { remoteAddress } }, outgoing: {} });
    for (const address of ['203.0.113.9', '::ffff:198.51.100.7', '2001:db8::1', '10.0.0.1']) {
      for (const path of ['/admin', ...API]) {
        const res = await from(address, path);
        expect(res.status, `${address} ${path}`).toBe(403);
        expect(res.headers.get('cache-control')).toBe('no-store');
        expect(await res.json()).toEqual({ error: 'Forbidden: without authentication the admin page is served to loopback clients only' });
      }
    }
    expect(mem.lines().filter((l) => l.msg === 'admin refused: without authentication only loopback clients may see it')).toHaveLength(
      4 * (1 + API.length),
    );
    // The same path with a loopback peer address passes.
    for (const address of ['127.0.0.1', '::ffff:127.0.0.1', '::1', '127.8.9.10']) expect((await from(address)).status, address).toBe(200);
  });
});

/**
 * `context` with /admin served without its meta refresh, so that a reload never destroys a page
 * under evaluation between two reads (the reload itself is checked on a page without this).
 */
async function withoutRefresh(context: BrowserContext): Promise<BrowserContext> {
  await context.route(/\/admin$/, async (route) => {
    const response = await route.fetch();
    const body = (await response.text()).replace(/<meta http-equiv="refresh"[^>]*>/, '');
    await route.fulfill({ response, body });
  });
  return context;
}

describeWith(['chromium'], 'admin page in a real browser (Debian chromium)', () => {
  let browser: Browser;
  let gw: TestGateway;
  let legacy: { client: Client; transport: StreamableHTTPClientTransport };

  beforeAll(async () => {
    gw = await startGateway({
      auth: {
        mode: 'apiKeys',
        keys: [
          { principal: 'ops', key: OPS_KEY },
          { principal: 'dev', key: DEV_KEY },
        ],
      },
      admin: { enabled: true, principals: ['apikey:ops'], refreshSeconds: 1 },
      upstreams: {
        f: { ...fixtureStdio(), tasks: { taskAfterMs: 0 } },
        // Upstreams whose tool name and stderr carry markup.
        x: fixtureStdio(undefined, { FIXTURE_ASK_TOOL: HOSTILE_TOOL }),
        broken: {
          transport: 'stdio',
          protocol: 'legacy',
          command: process.execPath,
          args: ['-e', `console.error(${JSON.stringify(HOSTILE_STDERR)}); process.exit(3)`],
        },
      },
    });
    // A call parked on an elicitation, and a task that keeps working (progress every second).
    const parked = await rpc(gw.url('f'), 'tools/call', { name: 'ask_name', arguments: {} }, { caps: { elicitation: {} }, headers: dev });
    expect(parked.body.result.resultType).toBe('input_required');
    const task = await rpc(
      gw.url('f'),
      'tools/call',
      { name: 'slow', arguments: { ms: 60_000, steps: 60 } },
      { caps: TASKS, headers: dev },
    );
    expect(task.body.result.resultType).toBe('task');
    // A legacy client's call through its own session, answered; the session stays open.
    const client = new Client({ name: 'admin-e2e', version: '1.0.0' }, { capabilities: { elicitation: {} } });
    client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: { name: 'Ada' } }));
    const transport = new StreamableHTTPClientTransport(new URL(gw.url('f')), { requestInit: { headers: dev } });
    await client.connect(transport);
    await client.callTool({ name: 'ask_name', arguments: {} });
    legacy = { client, transport };
    // The hostile tool name breaks the MCP tool-name rules: left out of tools/list (and shown on
    // the page as left out), and not callable.
    const listed = await rpc(gw.url('x'), 'tools/list', {}, { headers: dev });
    expect(listed.body.result.tools.map((t: { name: string }) => t.name)).not.toContain(HOSTILE_TOOL);
    const hostile = await rpc(
      gw.url('x'),
      'tools/call',
      { name: HOSTILE_TOOL, arguments: {} },
      { caps: { elicitation: {} }, headers: dev },
    );
    expect(hostile.body.error).toMatchObject({ code: -32602, data: { reason: 'invalid-tool-name', name: HOSTILE_TOOL } });
    expect((await rpc(gw.url('broken'), 'tools/list', {}, { headers: dev })).body.error.data.reason).toBe('unreachable');
    browser = await launchChromium();
  }, scaled(60_000));

  afterAll(async () => {
    await browser?.close();
    await legacy?.transport.terminateSession().catch(() => {});
    await gw?.close();
  });

  it(
    'shows the parked call, the running task, the session counts, the legacy session and the census, and reloads itself',
    async () => {
      const context = await withoutRefresh(await browser.newContext({ extraHTTPHeaders: ops, viewport: { width: 1600, height: 1000 } }));
      const page = await context.newPage();
      try {
        const res = await page.goto(`${gw.base}/admin`);
        expect(res?.status()).toBe(200);
        expect(await page.title()).toBe('mrtr-gateway admin');
        const rows = (section: string) =>
          page.$$eval(`#${section} table:last-of-type tbody tr`, (trs) =>
            trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => (td.textContent ?? '').trim())),
          );
        const dev16 = principalHash('apikey:dev');

        // Upstreams: era, revision, transport; sessions idle / in use (the parked call and the task) / queued; legacy sessions; parked.
        const [upstream] = await rows('upstreams');
        expect(upstream!.slice(0, 9)).toEqual(['f', 'legacy (auto)', '2025-11-25', 'stdio', '0', '2', '0', '1', '1']);
        // Opened, died, restarts, failed opens, failing now.
        expect(upstream!.slice(9, 14)).toEqual(['2', '0', '0', '0', '0']);

        // The parked call: its tool, what it waits for, whose (hashed), the round, age and time left.
        const parked = (await rows('parked')).filter((r) => r[0] === 'f');
        expect(parked).toHaveLength(1);
        expect(await page.locator('#parked tbody tr', { hasText: 'ask_name' }).isVisible()).toBe(true);
        expect(parked[0]!.slice(0, 6)).toEqual(['f', 'ask_name', 'tools/call', 'elicitation (form)', dev16, '0']);
        expect(parked[0]![7]).toMatch(/^9 min \d+ s$/);

        // The task: counts by status and the running one.
        const counts = Object.fromEntries(
          await page.$$eval('#task-counts tbody tr', (trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent))),
        );
        expect(counts).toMatchObject({ working: '1', completed: '0', failed: '0' });
        const running = await rows('tasks');
        expect(running).toHaveLength(1);
        expect(running[0]!.slice(1, 4)).toEqual(['f', 'slow', 'working']);
        expect(await page.locator('#tasks tbody tr', { hasText: 'working' }).last().isVisible()).toBe(true);
        expect(running[0]![6]).toBe(dev16);

        // The legacy session: hashed id, upstream, transport, relay, revision, principal.
        const sessions = await rows('sessions');
        expect(sessions).toHaveLength(1);
        expect(sessions[0]!.slice(1, 6)).toEqual(['f', 'streamable-http', 'pass-through', '2025-11-25', dev16]);
        expect(sessions[0]![0]).toMatch(/^[0-9a-f]{16}$/);

        // The census: ask_name elicited a form twice, once through the Exchange, once in the legacy session.
        const census = (await rows('census')).filter((r) => r[0] === 'f');
        expect(census.map((r) => r.slice(0, 4))).toEqual([['f', 'ask_name', 'elicitation_form', '2']]);

        // Nothing secret on the page: no raw principal, key or session id.
        const htmlText = await page.content();
        for (const secret of ['apikey:dev', 'apikey:ops', DEV_KEY, OPS_KEY, legacy.transport.sessionId!])
          expect(htmlText).not.toContain(secret);

        mkdirSync(ARTIFACTS, { recursive: true });
        await page.screenshot({ path: join(ARTIFACTS, 'admin.png'), fullPage: true });
        expect(existsSync(join(ARTIFACTS, 'admin.png'))).toBe(true);
      } finally {
        await context.close();
      }

      // The page as served reloads by itself (refreshSeconds: 1) and shows the task's progress.
      const live = await browser.newContext({ extraHTTPHeaders: ops });
      try {
        const reloading = await live.newPage();
        await reloading.goto(`${gw.base}/admin`);
        expect(await reloading.locator('meta[http-equiv="refresh"]').getAttribute('content')).toBe('1');
        await reloading.waitForEvent('load', { timeout: scaled(5000) });
        await reloading.waitForFunction(
          () => /\d+\/60/.test(document.querySelector('#tasks table:last-of-type tbody tr')?.textContent ?? ''),
          undefined,
          {
            timeout: scaled(10_000),
          },
        );
      } finally {
        await live.close();
      }
    },
    scaled(40_000),
  );

  it('escapes what upstreams chose: a tool name and stderr full of markup show as text, inject nothing', async () => {
    const raw = await (await get(`${gw.base}/admin`, ops)).text();
    expect(raw).not.toContain('<img');
    expect(raw).not.toContain('<b ');
    expect(raw.match(/<script/g)).toBeNull();
    expect(raw).toContain('&lt;script&gt;document.title=&quot;pwned&quot;&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;&amp;amp;');
    expect(raw).toContain('fatal: &lt;/pre&gt;&lt;script&gt;');

    const context = await withoutRefresh(await browser.newContext({ extraHTTPHeaders: ops }));
    const page = await context.newPage();
    try {
      await page.goto(`${gw.base}/admin`);
      expect(await page.title()).toBe('mrtr-gateway admin');
      expect(await page.$$eval('script, img, b', (els) => els.length)).toBe(0);
      const cells = (selector: string) => page.$$eval(selector, (tds) => tds.map((td) => td.textContent));
      expect(await cells('#dropped tbody tr td:nth-child(3)')).toEqual([HOSTILE_TOOL]);
      expect(await cells('#dropped tbody tr td:nth-child(4)')).toEqual(['invalid-name']);
      expect(await cells('#dropped tbody tr td:nth-child(5)')).toEqual([
        'the name has characters outside A-Z, a-z, 0-9, _, - and . ("<" ">" "=" "\\"" "/")',
      ]);
      const stderr = await cells('#upstreams tbody tr pre');
      expect(stderr).toEqual([HOSTILE_STDERR]);
    } finally {
      await context.close();
    }
  });
});
