/**
 * `mrtr-gateway check --config FILE [--connect]`, the real CLI: a config that would start exits 0
 * with one line per upstream; each kind of problem (a missing command or working directory, an
 * unset variable, a URL that is not http(s), and with `--connect` an upstream that does not answer)
 * exits 2 and names it, in both config formats. `--connect` starts server-everything over stdio and
 * reaches a 2026-07-28 server over HTTP, then leaves no child behind and never listens.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { alive, runCli, running } from '../helpers/cli.js';
import { MODERN_FIXTURE, eventually } from '../helpers/fixture.js';
import { everythingStdio } from '../helpers/gateway.js';
import { EVERYTHING, ROOT, spawnListening, type SpawnedServer } from '../helpers/processes.js';
import { scaled } from '../helpers/budget.js';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'mrtr-check-test-'));
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

let files = 0;
/** Writes `config` to a fresh file and runs `check --config FILE …flags`. */
async function check(config: unknown, flags: string[] = [], env: Record<string, string | undefined> = {}) {
  const file = join(dir, `config-${++files}.json`);
  writeFileSync(file, JSON.stringify(config));
  const r = await runCli(['check', '--config', file, ...flags], { env, timeoutMs: 60_000 });
  return { ...r, file, lines: r.stdout.split('\n').filter(Boolean) };
}

/** A closed port of 127.0.0.1: listened on, then closed. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

describe('check without --connect', () => {
  it('a good config of either format → exit 0, one ok line per upstream with what it starts or reaches', async () => {
    const servers = await check({
      mcpServers: { everything: { command: 'node', args: [EVERYTHING, 'stdio'] }, remote: { url: 'http://127.0.0.1:9/mcp' } },
    });
    expect(servers.code).toBe(0);
    expect(servers.lines).toEqual([
      `ok   everything  stdio            node ${EVERYTHING} stdio`,
      'ok   remote      streamable-http  http://127.0.0.1:9/mcp',
    ]);
    expect(servers.stderr).toBe('');
    const gateway = await check({ upstreams: { e: { ...everythingStdio, cwd: dir } } });
    expect(gateway.code).toBe(0);
    expect(gateway.lines).toEqual([`ok   e  stdio  ${process.execPath} ${EVERYTHING} stdio`]);
  });

  it('a command not on PATH, a path that is not there or not executable, a missing cwd → exit 2, a FAIL line each, the others ok', async () => {
    writeFileSync(join(dir, 'not-executable.sh'), '#!/bin/sh\n');
    const r = await check({
      mcpServers: {
        good: { command: 'node', args: [EVERYTHING, 'stdio'] },
        bare: { command: 'no-such-command-3f9a' },
        path: { command: '/nonexistent/bin/server' },
        plain: { command: './not-executable.sh', cwd: '.' },
        nocwd: { command: 'node', cwd: 'missing-dir' },
      },
    });
    expect(r.code).toBe(2);
    expect(r.lines).toEqual([
      `ok   good   stdio  node ${EVERYTHING} stdio`,
      "FAIL bare   stdio  command 'no-such-command-3f9a' not found on PATH",
      "FAIL path   stdio  command '/nonexistent/bin/server' does not exist",
      `FAIL plain  stdio  command './not-executable.sh' is not executable (${join(dir, 'not-executable.sh')})`,
      `FAIL nocwd  stdio  the working directory ${join(dir, 'missing-dir')} does not exist`,
    ]);
  });

  it("a bare command is looked up on the child's PATH: its env.PATH, else the gateway's", async () => {
    const gateway = { upstreams: { e: { transport: 'stdio', command: 'node', env: { PATH: '/nonexistent' } } } };
    const r = await check(gateway);
    expect(r.code).toBe(2);
    expect(r.lines).toEqual(["FAIL e  stdio  command 'node' not found on PATH"]);
  });

  it('an unset ${NAME} → exit 2, one FAIL line naming the variable and where it is, in both formats', async () => {
    const env = { MRTR_CHECK_UNSET: undefined };
    const servers = await check({ mcpServers: { s: { command: 'node', env: { TOKEN: '${MRTR_CHECK_UNSET}' } } } }, [], env);
    expect(servers.code).toBe(2);
    expect(servers.stdout).toBe(
      `FAIL ${servers.file}: invalid configuration:\n  mcpServers.s.env.TOKEN: environment variable MRTR_CHECK_UNSET is not set\n`,
    );
    const gateway = await check({ upstreams: { s: { ...everythingStdio, env: { T: 'Bearer ${MRTR_CHECK_UNSET}' } } } }, [], env);
    expect(gateway.code).toBe(2);
    expect(gateway.stdout).toBe(`FAIL ${gateway.file}: upstreams.s.env.T: environment variable MRTR_CHECK_UNSET is not set\n`);
  });

  it('a URL that is not http(s) → exit 2 naming the upstream and the field, in both formats', async () => {
    const servers = await check({ mcpServers: { r: { url: 'ftp://example.com/mcp' } } });
    expect(servers.code).toBe(2);
    expect(servers.stdout).toContain(
      `FAIL ${servers.file}: invalid configuration:\n  mcpServers.r.url: expected an http:// or https:// URL`,
    );
    const gateway = await check({ upstreams: { r: { transport: 'streamable-http', url: 'not a url' } } });
    expect(gateway.code).toBe(2);
    expect(gateway.stdout).toContain('upstreams.r.url: expected an http:// or https:// URL');
  });

  it('--federate: two servers whose tools would share a name on /mcp → exit 2 naming both and what to do', async () => {
    const servers = {
      mcpServers: {
        a: { command: 'node', 'mrtr-gateway': { tools: { allow: ['b_x'] } } },
        a_b: { command: 'node', 'mrtr-gateway': { tools: { allow: ['x'] } } },
      },
    };
    expect((await check(servers)).code).toBe(0);
    const r = await check(servers, ['--federate']);
    expect(r.code).toBe(2);
    expect(r.stdout).toContain(
      `mcpServers.a_b["mrtr-gateway"].tools.allow[0]: tool 'a_b_x' would be served on /mcp by both upstreams 'a' and 'a_b'`,
    );
    expect(r.stdout).toContain('a server list cannot set other prefixes: rename a server');
  });

  it(
    'what the start refuses beyond the file → exit 2 with its message: 0.0.0.0 without auth (listen.host, HOST, --host), LOG_LEVEL, PORT, --port',
    async () => {
      const servers = { mcpServers: { s: { command: 'node' } } };
      const anonymous = { auth: { mode: 'none', allowAnonymous: true }, upstreams: { e: everythingStdio } };
      const [inFile, byEnv, byFlag, allowed, level, port, flag] = await Promise.all([
        check({ listen: { host: '0.0.0.0' }, upstreams: { e: everythingStdio } }),
        check(servers, [], { HOST: '0.0.0.0' }),
        check(servers, ['--host', '0.0.0.0']),
        check(anonymous, [], { HOST: '0.0.0.0' }),
        check(servers, [], { LOG_LEVEL: 'bogus' }),
        check(servers, [], { PORT: '99999' }),
        check(servers, ['--port', 'x']),
      ]);
      const refusal = 'FAIL refusing to listen on 0.0.0.0 without authentication: configure auth';
      for (const r of [inFile, byEnv, byFlag])
        expect([r.code, r.lines.length, r.lines[0]?.slice(0, refusal.length)]).toEqual([2, 1, refusal]);
      expect(allowed.code).toBe(0);
      expect([level.code, level.stdout]).toEqual([
        2,
        "FAIL LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent (in any case), got 'bogus'\n",
      ]);
      expect([port.code, port.stdout]).toEqual([2, "FAIL --port/PORT must be a decimal integer from 0 to 65535, got '99999'\n"]);
      expect([flag.code, flag.stdout]).toEqual([2, "FAIL --port/PORT must be a decimal integer from 0 to 65535, got 'x'\n"]);
    },
    scaled(120_000),
  );

  it('an mcpServers file: a skip line per disabled server; the editor keys it ignores noted once on stderr', async () => {
    const r = await check({
      mcpServers: {
        on: { command: 'node', autoApprove: ['x'], timeout: 60 },
        off: { command: 'node', disabled: true },
      },
    });
    expect(r.code).toBe(0);
    expect(r.lines).toEqual(['ok   on   stdio  node', 'skip off  disabled']);
    expect(r.stderr).toBe('mrtr-gateway check: note: mcpServers.on: ignoring keys the gateway does not use: autoApprove, timeout\n');
  });

  it("--connect: an upstream that takes each caller's credential is ok, not connected, and says why", async () => {
    const r = await check(
      { upstreams: { fwd: { transport: 'streamable-http', url: 'http://127.0.0.1:9/mcp', forwardAuthorization: true } } },
      ['--connect'],
    );
    expect(r.code).toBe(0);
    expect(r.lines).toEqual([
      "ok   fwd  streamable-http  http://127.0.0.1:9/mcp  (not connected: takes each caller's credential, forwardAuthorization)",
    ]);
  });

  it('a bad flag or --timeout → exit 2 with the usage on stderr; --help → exit 0', async () => {
    const bad = await runCli(['check', '--bogus']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('usage: mrtr-gateway check --config PATH [--connect [--timeout MS]]');
    const alone = await check({ upstreams: { e: everythingStdio } }, ['--timeout', '5000']);
    expect(alone.code).toBe(2);
    expect(alone.stderr).toContain('--timeout needs --connect');
    expect(alone.stdout).toBe('');
    const timeout = await check({ upstreams: { e: everythingStdio } }, ['--connect', '--timeout', '1s']);
    expect(timeout.code).toBe(2);
    expect(timeout.stderr).toContain("--timeout must be a whole number of ms from 1 to 2147483647, got '1s'");
    const help = await runCli(['check', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/Exit codes:\n {2}0 {2}.+\n {2}2 {2}.+/);
  });
});

describe('check --connect', () => {
  let modern: SpawnedServer;
  let silent: Server;
  const sockets = new Set<Socket>();
  beforeAll(async () => {
    modern = await spawnListening(['--import', 'tsx', MODERN_FIXTURE, 'http']);
    // Accepts connections and never answers.
    silent = createServer((s) => void sockets.add(s));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  }, scaled(30_000));
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    silent?.close();
    await modern?.stop();
  });

  it(
    'server-everything over stdio and a 2026-07-28 server over HTTP → exit 0, each line says what answered; the child is gone, nothing listened',
    async () => {
      const pidFile = join(dir, 'everything.pid');
      const r = await check(
        {
          mcpServers: {
            everything: { command: 'sh', args: ['-c', `echo $$ > ${pidFile}; exec node ${EVERYTHING} stdio`] },
            modern: { url: `http://127.0.0.1:${modern.port}/mcp` },
          },
        },
        ['--connect'],
      );
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      expect(r.lines).toHaveLength(2);
      expect(r.lines[0]).toMatch(
        /^ok {3}everything  stdio +sh -c .+ {2}connected: legacy 20\d\d-\d\d-\d\d \(mcp-servers\/everything [\d.]+\)$/,
      );
      expect(r.lines[1]).toBe(
        `ok   modern      streamable-http  http://127.0.0.1:${modern.port}/mcp  connected: 2026-07-28 (server/discover)`,
      );
      expect(r.stdout).not.toContain('listening');
      expect(alive(Number(readFileSync(pidFile, 'utf8')))).toBe(false);
    },
    scaled(60_000),
  );

  it(
    'npx: a package the registry does not have shows the lines naming it; one still silent (installing) at the timeout is still starting, left to finish',
    async () => {
      const bin = join(dir, 'bin');
      mkdirSync(bin, { recursive: true });
      // Stand-ins for npx: one fails as npm does for a package the registry lacks, one installs silently.
      writeFileSync(
        join(bin, 'npx'),
        [
          '#!/bin/sh',
          'cat >&2 <<EOF',
          'npm error code E404',
          'npm error 404 Not Found - GET https://registry.npmjs.org/@nope%2fno-such-server - Not found',
          'npm error 404',
          "npm error 404  '@nope/no-such-server@*' is not in this registry.",
          'npm error 404',
          'npm error A complete log of this run can be found in: /tmp/npm-debug-0.log',
          'EOF',
          'exit 1',
          '',
        ].join('\n'),
        { mode: 0o755 },
      );
      const slow = join(dir, 'slow');
      mkdirSync(slow, { recursive: true });
      const pidFile = join(dir, 'installing.pid');
      writeFileSync(join(slow, 'npx'), `#!/bin/sh\necho $$ > ${pidFile}\nexec sleep 30\n`, { mode: 0o755 });
      const r = await check(
        {
          upstreams: {
            missing: { transport: 'stdio', command: join(bin, 'npx'), args: ['-y', '@nope/no-such-server'] },
            installing: { transport: 'stdio', command: join(slow, 'npx'), args: ['-y', 'some-server'] },
          },
        },
        ['--connect', '--timeout', '2000'],
      );
      process.kill(Number(readFileSync(pidFile, 'utf8')));
      expect(r.code).toBe(2);
      expect(r.lines[0]).toMatch(/^FAIL missing {5}stdio .+the process said: npm error code E404$/);
      expect(r.lines.slice(1, 4)).toEqual([
        '     npm error 404 Not Found - GET https://registry.npmjs.org/@nope%2fno-such-server - Not found',
        "     npm error 404  '@nope/no-such-server@*' is not in this registry.",
        expect.stringMatching(/^FAIL installing  stdio  Upstream 'installing' did not start within --timeout 2000 ms \(still starting/),
      ]);
      expect(r.lines[3]).toContain('a first run may be installing');
      expect(r.lines[3]).toContain('raise --timeout');
      expect(r.lines[3]).not.toContain('protocol: "legacy"');
    },
    scaled(60_000),
  );

  it(
    'Ctrl-C (SIGINT) during --connect ends the children, in process groups of their own, before check exits (130)',
    async () => {
      const pidFile = join(dir, 'interrupted.pid');
      const file = join(dir, 'interrupted.json');
      const script = `require('fs').writeFileSync(${JSON.stringify(pidFile)}, String(process.pid)); process.on('SIGTERM', () => {}); setInterval(() => {}, 1000)`;
      writeFileSync(
        file,
        JSON.stringify({ upstreams: { stubborn: { transport: 'stdio', command: process.execPath, args: ['-e', script] } } }),
      );
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', 'src/main.ts', 'check', '--config', file, '--connect', '--timeout', '60000'],
        {
          cwd: ROOT,
          stdio: 'ignore',
        },
      );
      const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
      expect(await eventually(() => existsSync(pidFile), scaled(30_000))).toBe(true);
      child.kill('SIGINT');
      expect(await exited).toBe(130);
      expect(running(Number(readFileSync(pidFile, 'utf8')))).toBe(false);
    },
    scaled(60_000),
  );

  it(
    "a child that ignores SIGTERM and a shell wrapper's background job are gone when check exits (SIGKILL after 2 s)",
    async () => {
      const stubbornPid = join(dir, 'stubborn.pid');
      const backgroundPid = join(dir, 'background.pid');
      const ignoreTerm = (file: string) =>
        `require('fs').writeFileSync(${JSON.stringify(file)}, String(process.pid)); process.on('SIGTERM', () => {}); setInterval(() => {}, 1000)`;
      const r = await check(
        {
          upstreams: {
            stubborn: { transport: 'stdio', command: process.execPath, args: ['-e', ignoreTerm(stubbornPid)] },
            wrapped: {
              transport: 'stdio',
              command: 'sh',
              args: ['-c', `${process.execPath} -e "$0" & exec ${process.execPath} ${EVERYTHING} stdio`, ignoreTerm(backgroundPid)],
            },
          },
        },
        ['--connect', '--timeout', '3000'],
      );
      expect(r.lines[0]).toMatch(/^FAIL stubborn  stdio +Upstream 'stubborn' did not start within --timeout 3000 ms/);
      expect(r.lines[1]).toMatch(/^ok {3}wrapped {3}stdio .+connected: legacy /);
      expect(running(Number(readFileSync(stubbornPid, 'utf8')))).toBe(false);
      expect(running(Number(readFileSync(backgroundPid, 'utf8')))).toBe(false);
    },
    scaled(60_000),
  );

  it(
    'a gateway config: a stdio command that exits at once or never answers (ended), a closed port, a server that never answers → exit 2, a FAIL line each, within --timeout',
    async () => {
      const started = performance.now();
      const pidFile = join(dir, 'mute.pid');
      const r = await check(
        {
          upstreams: {
            good: everythingStdio,
            mute: { transport: 'stdio', command: 'sh', args: ['-c', `echo $$ > ${pidFile}; exec sleep 60`] },
            exits: { transport: 'stdio', command: process.execPath, args: ['-e', 'process.exit(3)'] },
            closed: { transport: 'streamable-http', url: `http://127.0.0.1:${await closedPort()}/mcp` },
            silent: { transport: 'streamable-http', url: `http://127.0.0.1:${(silent.address() as AddressInfo).port}/mcp` },
          },
        },
        ['--connect', '--timeout', '2000'],
      );
      expect(r.code).toBe(2);
      expect(r.lines).toHaveLength(5);
      expect(r.lines[0]).toMatch(/^ok {3}good {4}stdio .+connected: legacy /);
      expect(r.lines[1]).toMatch(/^FAIL mute {4}stdio +Upstream 'mute' did not start within --timeout 2000 ms .+or raise --timeout/);
      expect(alive(Number(readFileSync(pidFile, 'utf8')))).toBe(false);
      expect(r.lines[2]).toMatch(
        /^FAIL exits {3}stdio +Upstream 'exits' could not be started or reached: the process exited before it answered/,
      );
      expect(r.lines[3]).toMatch(/^FAIL closed {2}streamable-http {2}Upstream 'closed' could not be started or reached: .*ECONNREFUSED/);
      expect(r.lines[4]).toMatch(/^FAIL silent {2}streamable-http {2}Upstream 'silent' did not start within --timeout 2000 ms/);
      expect(performance.now() - started).toBeLessThan(scaled(15_000));
    },
    scaled(60_000),
  );
});
