/**
 * The real CLI (`node --import tsx src/main.ts`) rejects bad configurations with exit code 2 and
 * a one-screen message naming the problem, without a stack trace.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { everythingStdio, rpc, startGateway } from '../helpers/gateway.js';
import { startCli } from '../helpers/cli.js';
import { eventually } from '../helpers/fixture.js';
import { ROOT } from '../helpers/processes.js';
import { readConfigFile } from '../../src/config/load.js';

let dir: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'mrtr-config-test-'));
});

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Writes `content` (a string verbatim, anything else as JSON) to a temp file and returns its path. */
function writeConfig(name: string, content: unknown): string {
  const file = join(dir, name);
  writeFileSync(file, typeof content === 'string' ? content : JSON.stringify(content, null, 2));
  return file;
}

/** Runs the CLI with `--config file --port 0` and resolves with its exit code and output. */
function runCli(
  file: string,
  timeoutMs = 20_000,
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const env = { ...process.env };
    delete env.UNSET_VAR_XYZ;
    delete env.PORT;
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts', '--config', file, '--port', '0'], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`CLI did not exit within ${timeoutMs} ms; stdout: ${stdout}; stderr: ${stderr}`));
    }, timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** The message `readConfigFile` throws for `file`, or undefined when it is accepted. */
function parseConfigFileProblem(file: string): string | undefined {
  try {
    readConfigFile(file, {});
    return undefined;
  } catch (e) {
    return (e as Error).message;
  }
}

/** No `    at ` frames: the message is for a human, not a crash dump. */
function expectNoStackTrace(stderr: string): void {
  expect(stderr).not.toMatch(/^\s+at /m);
  expect(stderr).not.toContain('    at ');
}

describe('CLI config errors', () => {
  it('upstreams.everything.maxSessions given as the string "8" → exit 2, stderr names the path, no stack trace', async () => {
    const file = writeConfig('max-sessions-string.json', { upstreams: { everything: { ...everythingStdio, maxSessions: '8' } } });
    const r = await runCli(file);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('upstreams.everything.maxSessions');
    expect(r.stderr).toContain(file);
    expectNoStackTrace(r.stderr);
  });

  it('an unknown top-level key → exit 2, stderr names the key', async () => {
    const file = writeConfig('unknown-key.json', { upstreams: { everything: everythingStdio }, surpriseKey: true });
    const r = await runCli(file);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('surpriseKey');
    expectNoStackTrace(r.stderr);
  });

  it('a file that is not valid JSON → exit 2, stderr says it is not JSON', async () => {
    const file = writeConfig('broken.json', '{ "upstreams": { "everything": ');
    const r = await runCli(file);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/JSON/);
    expect(r.stderr).toContain(file);
    expectNoStackTrace(r.stderr);
  });

  it('an unset ${UNSET_VAR_XYZ} in a requestState secret → exit 2, stderr names the variable and the path', async () => {
    const file = writeConfig('unset-env.json', {
      requestState: { keys: [{ kid: 'k1', secret: '${UNSET_VAR_XYZ}' }] },
      upstreams: { everything: everythingStdio },
    });
    const r = await runCli(file);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('UNSET_VAR_XYZ');
    expect(r.stderr).toContain('requestState.keys[0].secret');
    expectNoStackTrace(r.stderr);
  });

  it('a stdio cwd that does not exist → exit 2, stderr names the upstream and the path', async () => {
    const missing = join(dir, 'no-such-dir');
    const file = writeConfig('missing-cwd.json', { upstreams: { everything: { ...everythingStdio, cwd: missing } } });
    const r = await runCli(file);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`upstreams.everything.cwd: the working directory ${missing} does not exist`);
    expectNoStackTrace(r.stderr);
  });

  it('a stdio cwd that is a file → exit 2, stderr says it is not a directory', async () => {
    const notDir = writeConfig('plain-file', 'x');
    const file = writeConfig('file-cwd.json', { mcpServers: { srv: { command: 'node', cwd: notDir } } });
    const r = await runCli(file);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`mcpServers.srv.cwd: the working directory ${notDir} is not a directory`);
  });

  it('maxParkedSessions above maxSessions, maxParkedSessionsPerPrincipal above maxSessionsPerPrincipal → exit 2, stderr names both settings of each', async () => {
    const file = writeConfig('parked-over-sessions.json', {
      upstreams: {
        everything: {
          ...everythingStdio,
          maxSessions: 4,
          maxParkedSessions: 5,
          maxSessionsPerPrincipal: 2,
          maxParkedSessionsPerPrincipal: 3,
        },
      },
    });
    const r = await runCli(file);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('upstreams.everything.maxParkedSessions: maxParkedSessions (5) is greater than maxSessions (4)');
    expect(r.stderr).toContain(
      'upstreams.everything.maxParkedSessionsPerPrincipal: maxParkedSessionsPerPrincipal (3) is greater than maxSessionsPerPrincipal (2)',
    );
    expectNoStackTrace(r.stderr);
    const equal = writeConfig('parked-equal-sessions.json', {
      upstreams: { everything: { ...everythingStdio, maxSessions: 4, maxParkedSessions: 4 } },
    });
    expect(parseConfigFileProblem(equal)).toBeUndefined();
  });

  it('one API key under two principals (once as key, once as its sha256) → exit 2, stderr names both entries', async () => {
    const key = 'shared-key-0123456789';
    const file = writeConfig('duplicate-key.json', {
      auth: {
        mode: 'apiKeys',
        keys: [
          { principal: 'a', key },
          { principal: 'b', sha256: createHash('sha256').update(key).digest('hex').toUpperCase() },
        ],
      },
      upstreams: { everything: everythingStdio },
    });
    const r = await runCli(file);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(
      "auth.keys[1]: the same key as auth.keys[0] (principal 'a'): each key must identify one principal; give 'b' a key of its own",
    );
    expectNoStackTrace(r.stderr);
  });

  const cwdWithOthers = [
    [
      'an mcpServers file with a bad cwd and a bad server name',
      'cwd-and-name.json',
      { mcpServers: { badcwd: { command: 'node', cwd: 'nope' }, 'a b': { command: 'node' } } },
      'mcpServers.badcwd.cwd',
      '"a b" cannot be an upstream name',
    ],
    [
      'a gateway config with a bad cwd and a schema problem elsewhere',
      'cwd-and-schema.json',
      { upstreams: { badcwd: { ...everythingStdio, cwd: 'nope' }, other: { ...everythingStdio, maxSessions: 0 } } },
      'upstreams.badcwd.cwd',
      'upstreams.other.maxSessions',
    ],
  ] as const;
  for (const [what, name, content, cwdPath, other] of cwdWithOthers) {
    it(`${what} → exit 2, stderr lists both`, async () => {
      const r = await runCli(writeConfig(name, content));
      expect(r.code).toBe(2);
      expect(r.stderr).toContain(`${cwdPath}: the working directory ${join(dir, 'nope')} does not exist`);
      expect(r.stderr).toContain(other);
      expectNoStackTrace(r.stderr);
    });
  }

  it('a missing config file → exit 2, stderr names the file', async () => {
    const file = join(dir, 'does-not-exist.json');
    const r = await runCli(file);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(file);
    expectNoStackTrace(r.stderr);
  });
});

describe('log levels', () => {
  it('LOG_LEVEL=DEBUG is accepted as debug (any case), and the gateway logs at debug', async () => {
    const gw = await startCli({ upstreams: { everything: everythingStdio } }, undefined, { LOG_LEVEL: 'DEBUG' });
    try {
      // The child's stderr lines are logged at debug only.
      expect((await rpc(`${gw.base}/mcp/everything`, 'tools/list', {})).body.result.tools.length).toBeGreaterThan(0);
      expect(await eventually(() => gw.logs.some((l) => l.level === 20 && l.msg === 'upstream stderr'))).toBe(true);
    } finally {
      gw.child.kill('SIGTERM');
      await gw.exited;
    }
  });
});

describe('a stdio cwd removed after the start', () => {
  it('the call fails saying the working directory is gone, not only spawn ENOENT', async () => {
    const cwd = mkdtempSync(join(dir, 'cwd-'));
    const gw = await startGateway({ upstreams: { everything: { ...everythingStdio, cwd } } });
    try {
      rmSync(cwd, { recursive: true });
      const r = await rpc(gw.url('everything'), 'tools/list', {});
      expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'everything', reason: 'unreachable' } });
      expect(r.body.error.message).toContain(`the working directory ${cwd} does not exist`);
    } finally {
      await gw.close();
    }
  });
});
