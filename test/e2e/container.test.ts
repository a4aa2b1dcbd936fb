/**
 * The container image built from the Dockerfile, run as people run it (docs/operations.md, "Running
 * the container"): `docker run` with the baked config (config/container.json) and `MRTR_API_KEY`,
 * the port published on 127.0.0.1. Checks `/healthz` and `/readyz`, an `input_required` round of
 * the official v2 client against server-everything inside the container, that every process runs
 * as a non-root user under tini (PID 1, which reaps orphans), `check --connect` on the default
 * config path, and that `docker stop` (its default 10 s timeout) ends in exit code 0, also with a
 * call parked for its client's answer.
 *
 * Runs when `MRTR_TEST_IMAGE` names a built image (`.ci/run` builds `mrtr-gateway:ci` and sets
 * it); without it the tests are skipped, or fail in CI (test/helpers/installed.ts).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scaled } from '../helpers/budget.js';
import { eventually } from '../helpers/fixture.js';
import { rpc } from '../helpers/gateway.js';
import { inCi } from '../helpers/installed.js';
import { ROOT } from '../helpers/processes.js';
import { rounds, textOf, v2Client } from '../helpers/v2client.js';

const IMAGE = process.env.MRTR_TEST_IMAGE;
const run = promisify(execFile);

/** Runs `docker args…` and gives its stdout, trimmed; rejects with its stderr on a non-zero exit. */
async function docker(...args: string[]): Promise<string> {
  const { stdout } = await run('docker', args, { timeout: scaled(60_000) });
  return stdout.trim();
}

/** A running container of the image: its name, base URL and API key. */
interface Container {
  name: string;
  base: string;
  key: string;
}

const names: string[] = [];

/**
 * Starts the image with its baked config, a fresh `MRTR_API_KEY` and `args` for `docker run`,
 * publishes `port` (8787) on a free port of 127.0.0.1, and waits until `/readyz` answers 200 (server-everything started).
 */
async function start(image: string, args: string[] = [], port = 8787): Promise<Container> {
  const name = `mrtr-test-${process.pid}-${randomBytes(4).toString('hex')}`;
  const key = randomBytes(16).toString('hex');
  names.push(name);
  await docker('run', '-d', '--name', name, '-e', `MRTR_API_KEY=${key}`, '-p', `127.0.0.1::${port}`, ...args, image);
  // "127.0.0.1:49153" (one line per address the port is published on).
  const hostPort = (await docker('port', name, `${port}/tcp`)).split('\n')[0]!;
  const base = `http://${hostPort}`;
  const ready = await eventually(
    () =>
      fetch(`${base}/readyz`).then(
        (r) => r.status === 200,
        () => false,
      ),
    scaled(30_000),
    200,
  );
  if (!ready) throw new Error(`${name} not ready within 30 s; its logs:\n${await docker('logs', name).catch(String)}`);
  return { name, base, key };
}

/** Stops `c` as `docker stop` does (SIGTERM, SIGKILL after 10 s): the exit code and how long it took (ms). */
async function stop(c: Container): Promise<{ exitCode: number; ms: number }> {
  const t0 = performance.now();
  await docker('stop', c.name);
  const ms = performance.now() - t0;
  return { exitCode: Number(await docker('inspect', '-f', '{{.State.ExitCode}}', c.name)), ms };
}

/** The processes running in `c`: numeric uid and command line. */
async function processes(c: Container): Promise<{ uid: number; args: string }[]> {
  // Docker needs the pid column.
  const lines = (await docker('top', c.name, '-eo', 'uid,pid,args')).split('\n').slice(1);
  return lines.map((l) => {
    const m = /^\s*(\d+)\s+\d+\s+(.*)$/.exec(l)!;
    return { uid: Number(m[1]), args: m[2]! };
  });
}

/** The tool of server-everything that asks its client for a form. */
const ELICIT = 'trigger-elicitation-request';

function containerTests(image: string): void {
  let c: Container;
  beforeAll(async () => {
    c = await start(image);
  }, scaled(60_000));

  it('serves /healthz and /readyz (server-everything ready) and refuses MCP calls without the API key', async () => {
    const health = await fetch(`${c.base}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: 'ok' });
    const ready = await fetch(`${c.base}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ ready: true, upstreams: [{ name: 'everything', ready: true }] });
    expect((await rpc(`${c.base}/mcp/everything`, 'tools/list')).status).toBe(401);
  });

  it('a 2026-07-28 client (official v2 SDK) answers an input_required round of server-everything inside the container', async () => {
    const { client, record } = await v2Client(
      `${c.base}/mcp/everything`,
      { elicit: () => ({ action: 'accept', content: { name: 'Ada Lovelace', check: true, email: 'ada@example.com', integer: 7 } }) },
      { elicitation: { form: {} } },
      { authorization: `Bearer ${c.key}` },
    );
    try {
      expect(client.getNegotiatedProtocolVersion()).toBe('2026-07-28');
      const r = await client.callTool({ name: ELICIT, arguments: {} });
      expect(record.elicitation).toHaveLength(1);
      expect(rounds(record)).toBe(1);
      expect(textOf(r)).toContain('Ada Lovelace');
    } finally {
      await client.close();
    }
  });

  it('runs the gateway and its stdio child as the non-root node user', async () => {
    expect(await docker('exec', c.name, 'id', '-un')).toBe('node');
    expect(Number(await docker('exec', c.name, 'id', '-u'))).not.toBe(0);
    const ps = await processes(c);
    expect(ps.map((p) => p.args)).toEqual(
      expect.arrayContaining([expect.stringMatching(/^node dist\/main\.js/), expect.stringMatching(/server-everything/)]),
    );
    expect(ps.filter((p) => p.uid === 0)).toEqual([]);
  });

  it('PID 1 is tini, which reaps orphans (as an npx-launched server leaves its real server when npm exits)', async () => {
    expect((await docker('exec', c.name, 'cat', '/proc/1/cmdline')).split('\0')).toEqual(
      expect.arrayContaining(['/usr/bin/tini', '--', 'node', 'dist/main.js']),
    );
    // The subshell exits at once: its background sleep is orphaned, reparented to PID 1, and exits
    // 0.2 s later. Without a reaper at PID 1 it stays a zombie (state Z) as long as the container runs.
    const orphan = Number(await docker('exec', c.name, 'sh', '-c', '(sleep 0.2 & echo $!); true'));
    expect(orphan).toBeGreaterThan(1);
    const reaped = await eventually(
      () =>
        docker('exec', c.name, 'test', '-e', `/proc/${orphan}`).then(
          () => false,
          () => true,
        ),
      10_000,
      200,
    );
    const zombies = await docker('exec', c.name, 'sh', '-c', 'grep -l "^[0-9]* ([^)]*) Z" /proc/[0-9]*/stat || true');
    expect({ reaped, zombies }).toEqual({ reaped: true, zombies: '' });
  });

  it('check --connect without --config reads the mounted config path, and its exit code comes through tini', async () => {
    const ok = await docker('run', '--rm', '-e', `MRTR_API_KEY=${c.key}`, image, 'node', 'dist/main.js', 'check', '--connect');
    expect(ok).toMatch(/^ok +everything +stdio/m);
    // No MRTR_API_KEY: the config's ${MRTR_API_KEY} is unset, exit 2.
    const refused = await docker('run', '--rm', image, 'node', 'dist/main.js', 'check').then(
      () => 0,
      (e: { code?: number }) => e.code,
    );
    expect(refused).toBe(2);
  });

  it("a mounted config's listen is used with the image's HOST and PORT emptied (-e HOST= -e PORT=)", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'mrtr-container-'));
    const file = join(dir, 'gateway.config.json');
    const config = JSON.parse(await readFile(join(ROOT, 'config/container.json'), 'utf8'));
    // Readable by the image's uid 1000: a 0600 file of another user is refused (EACCES).
    await writeFile(file, JSON.stringify({ ...config, listen: { host: '0.0.0.0', port: 9000 } }), { mode: 0o644 });
    const p = await start(image, ['-e', 'HOST=', '-e', 'PORT=', '-v', `${file}:/etc/mrtr-gateway/gateway.config.json:ro`], 9000);
    expect((await fetch(`${p.base}/healthz`)).status).toBe(200);
    await docker('rm', '-f', p.name);
    await rm(dir, { recursive: true });
  });

  it(
    'docker stop, with the stdio child running: exit code 0, at once',
    async () => {
      expect((await processes(c)).some((p) => /server-everything/.test(p.args))).toBe(true);
      const { exitCode, ms } = await stop(c);
      expect(exitCode).toBe(0);
      // Nothing in flight: the drain has nothing to wait for.
      expect(ms).toBeLessThan(scaled(5000));
      expect(await docker('logs', c.name)).toContain('"msg":"stopped"');
    },
    scaled(30_000),
  );

  it(
    "docker stop with a call parked for its client's answer (input_required, never retried): exit code 0 within docker's 10 s",
    async () => {
      const p = await start(image);
      const asked = await rpc(
        `${p.base}/mcp/everything`,
        'tools/call',
        { name: ELICIT, arguments: {} },
        { caps: { elicitation: { form: {} } }, headers: { authorization: `Bearer ${p.key}` } },
      );
      expect(asked.body.result.resultType).toBe('input_required');
      const { exitCode, ms } = await stop(p);
      // 137 would be docker's SIGKILL at 10 s: the stop outlived the timeout.
      expect(exitCode).toBe(0);
      expect(ms).toBeLessThan(10_000);
      expect(await docker('logs', p.name)).toContain('"msg":"stopped"');
    },
    scaled(60_000),
  );
}

afterAll(async () => {
  for (const name of names.splice(0)) await docker('rm', '-f', name).catch(() => {});
}, scaled(60_000));

if (IMAGE) describe(`the container image ${IMAGE}`, () => containerTests(IMAGE));
else if (inCi())
  describe('the container image', () => {
    it('is named by MRTR_TEST_IMAGE', () => {
      throw new Error(
        `MRTR_TEST_IMAGE is not set; in CI (CI=${process.env.CI}) .ci/run builds the image and sets it, and these tests fail without it`,
      );
    });
  });
else
  describe.skip('the container image: SKIPPED because MRTR_TEST_IMAGE names no image (docker build -t mrtr-gateway . and set it)', () =>
    containerTests(''));
