/**
 * Operations: limits, isolation between upstreams, metrics, readiness, graceful stop, the
 * loopback-only rule for anonymous access, and the built artifact the container runs.
 */
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually, FixtureLog, fixtureStdio } from '../helpers/fixture.js';
import { alive, startCli } from '../helpers/cli.js';
import { ROOT } from '../helpers/processes.js';
import { scaled } from '../helpers/budget.js';

describe('limits and isolation', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({
      limits: { rateLimit: { requestsPerSecond: 2, burst: 5 } },
      upstreams: { stuck: fixtureStdio(), other: fixtureStdio() },
    });
  });
  afterAll(() => gw?.close());

  it('a burst over the rate limit gets 429 with Retry-After', async () => {
    const results = await Promise.all(
      Array.from({ length: 12 }, () =>
        fetch(`${gw.url('other')}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }),
      ),
    );
    const limited = results.filter((r) => r.status === 429);
    expect(limited.length).toBeGreaterThanOrEqual(6);
    expect(Number(limited[0]!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    const body = (await limited[0]!.json()) as any;
    expect(body.error.message).toMatch(/Rate limit/);
    await new Promise((r) => setTimeout(r, 3000));
  });

  it('echoes x-request-id, or assigns one', async () => {
    const given = await rpc(gw.url('other'), 'tools/list', {}, { headers: { 'x-request-id': 'req-42' } });
    expect(given.headers.get('x-request-id')).toBe('req-42');
    const assigned = await rpc(gw.url('other'), 'tools/list');
    expect(assigned.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
  });

  it(
    'a stuck upstream does not delay calls to another upstream',
    async () => {
      const stuck = rpc(gw.url('stuck'), 'tools/call', { name: 'slow', arguments: { ms: 4000, steps: 1 } });
      await new Promise((r) => setTimeout(r, 200));
      const started = Date.now();
      const quick = await rpc(gw.url('other'), 'tools/call', { name: 'slow', arguments: { ms: 10, steps: 1 } });
      expect(quick.body.result.content[0].text).toBe('slept 10ms');
      expect(Date.now() - started).toBeLessThan(scaled(2500));
      expect((await stuck).body.result.content[0].text).toBe('slept 4000ms');
    },
    scaled(20_000),
  );
});

describe('metrics and readiness', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({
      upstreams: {
        f: { ...fixtureStdio(), tasks: { taskAfterMs: 100 } },
        broken: { transport: 'stdio', command: '/nonexistent/legacy-mcp-server', required: true },
      },
    });
  });
  afterAll(() => gw?.close());

  const scrape = async () => (await fetch(`${gw.base}/metrics`)).text();
  const value = (text: string, series: string) => {
    const line = text.split('\n').find((l) => l.startsWith(series + ' '));
    return line ? Number(line.slice(series.length + 1)) : 0;
  };

  it('/metrics counters move for a call, an input round and a task', async () => {
    const before = await scrape();
    await rpc(gw.url('f'), 'tools/call', { name: 'slow', arguments: { ms: 10, steps: 1 } });
    const first = await rpc(gw.url('f'), 'tools/call', { name: 'ask_name', arguments: {} }, { caps: { elicitation: {} } });
    await rpc(
      gw.url('f'),
      'tools/call',
      {
        name: 'ask_name',
        arguments: {},
        requestState: first.body.result.requestState,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'M' } } },
      },
      { caps: { elicitation: {} } },
    );
    const task = await rpc(
      gw.url('f'),
      'tools/call',
      { name: 'slow', arguments: { ms: 400, steps: 1 } },
      { caps: { extensions: { 'io.modelcontextprotocol/tasks': {} } } },
    );
    expect(task.body.result.resultType).toBe('task');
    const completed = 'mrtr_tasks_total{status="completed"}';
    expect(await eventually(async () => value(await scrape(), completed) > value(before, completed))).toBe(true);
    const after = await scrape();
    expect(after).toContain('# TYPE mrtr_requests_total counter');
    const calls = 'mrtr_requests_total{upstream="f",method="tools/call",outcome="complete"}';
    expect(value(after, calls) - value(before, calls)).toBe(2);
    expect(value(after, 'mrtr_requests_total{upstream="f",method="tools/call",outcome="input_required"}')).toBeGreaterThanOrEqual(1);
    expect(
      value(after, 'mrtr_input_rounds_total{upstream="f",kind="elicitation"}') -
        value(before, 'mrtr_input_rounds_total{upstream="f",kind="elicitation"}'),
    ).toBe(1);
    expect(value(after, 'mrtr_tasks_total{status="working"}') - value(before, 'mrtr_tasks_total{status="working"}')).toBe(1);
    expect(value(after, 'mrtr_tasks_total{status="completed"}') - value(before, 'mrtr_tasks_total{status="completed"}')).toBe(1);
    expect(after).toMatch(/mrtr_upstream_seconds_count\{upstream="f",method="tools\/call"\} \d+/);
    expect(after).toMatch(/mrtr_gateway_added_seconds_count\{upstream="f",method="tools\/call"\} \d+/);
    expect(after).toMatch(/mrtr_upstream_sessions\{upstream="f",state="idle"\} \d+/);
    expect(after).toContain('mrtr_parked_calls');
  });

  it('/healthz is 200 and /readyz is 503 naming the required upstream whose command does not exist', async () => {
    expect((await fetch(`${gw.base}/healthz`)).status).toBe(200);
    const res = await fetch(`${gw.base}/readyz`);
    expect(res.status).toBe(503);
    const body = (await res.json()) as any;
    expect(body.ready).toBe(false);
    expect(body.upstreams).toEqual([{ name: 'broken', ready: false, reason: expect.stringMatching(/ENOENT|not found|spawn/i) }]);
  });

  it('another method on /healthz, /readyz or /metrics → 405 with Allow: GET, HEAD', async () => {
    for (const path of ['/healthz', '/readyz', '/metrics']) {
      const res = await fetch(`${gw.base}${path}`, { method: 'POST', body: '{}' });
      expect(res.status).toBe(405);
      expect(res.headers.get('allow')).toBe('GET, HEAD');
      expect(((await res.json()) as any).error.message).toBe(`POST is not supported on ${path}; use GET`);
    }
  });
});

describe('process lifecycle', () => {
  it(
    'SIGTERM during an in-flight call: the call finishes, the process exits 0, no child is left',
    async () => {
      const log = new FixtureLog();
      const gw = await startCli({ shutdownGraceMs: 5000, upstreams: { f: fixtureStdio(log) } });
      const call = rpc(`${gw.base}/mcp/f`, 'tools/call', { name: 'slow', arguments: { ms: 1500, steps: 1 } });
      expect(await eventually(() => log.of('call', 'slow').length > 0, 15_000)).toBe(true);
      const pids = [...new Set(log.events().map((e) => e.pid as number))];
      expect(pids.length).toBe(1);
      gw.child.kill('SIGTERM');
      const r = await call;
      expect(r.body.result.content[0].text).toBe('slept 1500ms');
      expect(await gw.exited).toEqual({ code: 0, signal: null });
      await new Promise((r2) => setTimeout(r2, 200));
      expect(alive(pids[0]!)).toBe(false);
    },
    scaled(30_000),
  );

  it(
    'calls still running when the grace period ends get -32603 "gateway shutting down"',
    async () => {
      const log = new FixtureLog();
      const gw = await startCli({ shutdownGraceMs: 300, upstreams: { f: fixtureStdio(log) } });
      const call = rpc(`${gw.base}/mcp/f`, 'tools/call', { name: 'slow', arguments: { ms: 10_000, steps: 1 } });
      expect(await eventually(() => log.of('call', 'slow').length > 0, 15_000)).toBe(true);
      gw.child.kill('SIGTERM');
      const r = await call;
      expect(r.body.error).toMatchObject({ code: -32603, message: 'gateway shutting down' });
      expect((await gw.exited).code).toBe(0);
    },
    scaled(30_000),
  );

  it('refuses to listen on a non-loopback address without auth (exit 2)', () => {
    let status = 0;
    let stderr = '';
    try {
      execFileSync(process.execPath, ['--import', 'tsx', 'src/main.ts', '--host', '0.0.0.0', '--port', '0'], {
        cwd: ROOT,
        stdio: 'pipe',
        timeout: 20_000,
      });
    } catch (e) {
      status = (e as { status: number }).status;
      stderr = String((e as { stderr: Buffer }).stderr);
    }
    expect(status).toBe(2);
    expect(stderr).toContain('refusing to listen on 0.0.0.0 without authentication');
  });

  it(
    'the built artifact (npm run build, node dist/main.js, as the container runs it) serves the default upstream',
    async () => {
      execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: 'pipe', timeout: 120_000 });
      const gw = await startCli(
        {
          upstreams: {
            everything: {
              transport: 'stdio',
              command: 'node',
              args: ['node_modules/@modelcontextprotocol/server-everything/dist/index.js', 'stdio'],
            },
          },
        },
        ['dist/main.js'],
      );
      try {
        const r = await rpc(`${gw.base}/mcp/everything`, 'tools/call', { name: 'echo', arguments: { message: 'built' } });
        expect(r.body.result.content[0].text).toBe('Echo: built');
        expect((await fetch(`${gw.base}/healthz`)).status).toBe(200);
      } finally {
        gw.child.kill('SIGTERM');
        expect((await gw.exited).code).toBe(0);
      }
    },
    scaled(120_000),
  );
});
