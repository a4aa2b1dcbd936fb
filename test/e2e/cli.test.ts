/**
 * The real CLI started from an `mcpServers` file (as Claude and other editors write it), the
 * environment stdio children get (`envPassthrough`), and the package's `bin` launcher
 * (`npx mrtr-gateway`, `npm start`): `--help`, a start from another working directory, the
 * sources it compiles in a checkout, and a production install without TypeScript, where it runs
 * `dist/`.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli, startCli, startCliArgs, type CliGateway } from '../helpers/cli.js';
import { everythingStdio, rpc } from '../helpers/gateway.js';
import { EVERYTHING, ROOT, startEverythingHttp, type SpawnedServer } from '../helpers/processes.js';
import { scaled } from '../helpers/budget.js';
import { FIXTURE } from '../helpers/fixture.js';

const BIN = join(ROOT, 'bin/mrtr-gateway.js');
/** The OpenTelemetry variables `--help` names. */
const OTEL_VARS = [
  'OTEL_TRACES_EXPORTER',
  'OTEL_EXPORTER_OTLP_ENDPOINT',
  'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
  'OTEL_SERVICE_NAME',
  'OTEL_TRACES_SAMPLER',
  'OTEL_PROPAGATORS',
];

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'mrtr-cli-test-'));
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function stop(gw: CliGateway | undefined): Promise<void> {
  if (!gw) return;
  gw.child.kill('SIGTERM');
  await gw.exited;
}

async function echo(url: string, message: string): Promise<string> {
  const r = await rpc(url, 'tools/call', { name: 'echo', arguments: { message } });
  expect(r.status).toBe(200);
  return r.body.result.content[0].text;
}

/** The child's environment, from server-everything's get-env tool. */
async function childEnv(url: string): Promise<Record<string, string>> {
  const r = await rpc(url, 'tools/call', { name: 'get-env', arguments: {} });
  expect(r.status).toBe(200);
  return JSON.parse(r.body.result.content[0].text);
}

/**
 * Starts `bin` in a fresh working directory with a relative `--config` (an mcpServers file naming
 * server-everything), echoes `message` through it, and checks that SIGTERM stops it with exit 0.
 */
async function serveFromElsewhere(bin: string, message: string): Promise<void> {
  const cwd = mkdtempSync(join(dir, 'elsewhere-'));
  writeFileSync(
    join(cwd, 'servers.json'),
    JSON.stringify({ mcpServers: { everything: { command: process.execPath, args: [EVERYTHING, 'stdio'] } } }),
  );
  const gw = await startCliArgs(['--config', 'servers.json', '--port', '0'], { entry: [bin], cwd });
  try {
    expect(await echo(`${gw.base}/mcp/everything`, message)).toBe(`Echo: ${message}`);
  } finally {
    gw.child.kill('SIGTERM');
  }
  expect(await gw.exited).toEqual({ code: 0, signal: null });
}

function expectNoStackTrace(stderr: string): void {
  expect(stderr).not.toContain('    at ');
}

describe('an mcpServers file given to --config', () => {
  let http: SpawnedServer;
  let gw: CliGateway;
  const value = 'value-from-the-gateway-env-5c1e';

  beforeAll(async () => {
    http = await startEverythingHttp();
    gw = await startCli(
      {
        mcpServers: {
          local: {
            command: process.execPath,
            args: [EVERYTHING, 'stdio'],
            env: { FROM_FILE: '${MRTR_TEST_FROM_FILE}' },
            autoApprove: ['echo'],
            timeout: 60,
          },
          remote: { type: 'http', url: `http://127.0.0.1:${http.port}/mcp`, alwaysAllow: [] },
          off: { command: '/nonexistent/server', disabled: true, description: 'not started' },
        },
      },
      undefined,
      { MRTR_TEST_FROM_FILE: value },
    );
  }, scaled(60_000));
  afterAll(async () => {
    await stop(gw);
    await http?.stop();
  });

  it('serves the stdio server and the HTTP server: a tools/call through each', async () => {
    expect(await echo(`${gw.base}/mcp/local`, 'to stdio')).toBe('Echo: to stdio');
    expect(await echo(`${gw.base}/mcp/remote`, 'to http')).toBe('Echo: to http');
  });

  it('skips the disabled server: not served, logged as skipped', async () => {
    const listening = gw.logs.find((l) => /listening/.test(l.msg));
    expect(listening!.endpoints).toEqual([`POST ${gw.base}/mcp/local`, `POST ${gw.base}/mcp/remote`]);
    const r = await rpc(`${gw.base}/mcp/off`, 'tools/list');
    expect(r.status).toBe(404);
    expect(gw.logs.find((l) => /skipping disabled servers/.test(l.msg))).toMatchObject({ level: 30, disabled: ['off'] });
  });

  it('warns about the editor keys it ignores, naming each server and key', () => {
    const warnings = gw.logs.filter((l) => l.level === 40 && /ignoring keys/.test(l.msg));
    expect(warnings.map((w) => [w.path, w.ignored])).toEqual([
      ['mcpServers.local', ['autoApprove', 'timeout']],
      ['mcpServers.remote', ['alwaysAllow']],
    ]);
    expect(warnings[0]!.msg).toBe('mcpServers.local: ignoring keys the gateway does not use: autoApprove, timeout');
  });

  it('substitutes ${NAME} in a server env; the start log names the variable, never its value', async () => {
    const env = await childEnv(`${gw.base}/mcp/local`);
    expect(env.FROM_FILE).toBe(value);
    expect(env.MRTR_TEST_FROM_FILE).toBeUndefined();
    expect(gw.logs.find((l) => l.upstream === 'local' && Array.isArray(l.env))).toMatchObject({
      level: 30,
      env: ['FROM_FILE'],
      passedThrough: [],
    });
    expect(JSON.stringify(gw.logs)).not.toContain(value);
  });
});

describe('--federate: every server of an mcpServers file on POST /mcp', () => {
  const servers = {
    mcpServers: {
      everything: { command: process.execPath, args: [EVERYTHING, 'stdio'] },
      legacy: { command: process.execPath, args: ['--import', 'tsx', FIXTURE, 'stdio'], cwd: ROOT },
    },
  };
  let gw: CliGateway | undefined;
  afterAll(() => stop(gw));

  it(
    'tools/list on /mcp shows both servers’ tools prefixed NAME_, and a prefixed tools/call reaches its server',
    async () => {
      const file = join(dir, 'federate.json');
      writeFileSync(file, JSON.stringify(servers));
      gw = await startCliArgs(['--config', file, '--port', '0', '--federate']);
      const listening = gw.logs.find((l) => /listening/.test(l.msg));
      expect(listening!.endpoints[0]).toBe(`POST ${gw.base}/mcp`);
      const list = await rpc(`${gw.base}/mcp`, 'tools/list');
      expect(list.status).toBe(200);
      const names: string[] = list.body.result.tools.map((t: { name: string }) => t.name);
      expect(names).toContain('everything_echo');
      expect(names).toContain('legacy_ask_name');
      expect(names.every((n) => n.startsWith('everything_') || n.startsWith('legacy_'))).toBe(true);
      const call = await rpc(`${gw.base}/mcp`, 'tools/call', { name: 'everything_echo', arguments: { message: 'federated' } });
      expect(call.status).toBe(200);
      expect(call.body.result.content[0].text).toBe('Echo: federated');
    },
    scaled(90_000),
  );

  it(
    'without the flag, POST /mcp is not served: 404',
    async () => {
      const file = join(dir, 'not-federated.json');
      writeFileSync(file, JSON.stringify({ mcpServers: { everything: servers.mcpServers.everything } }));
      const plain = await startCliArgs(['--config', file, '--port', '0']);
      try {
        const r = await rpc(`${plain.base}/mcp`, 'tools/list');
        expect(r.status).toBe(404);
        expect(plain.logs.find((l) => /listening/.test(l.msg))!.endpoints).toEqual([`POST ${plain.base}/mcp/everything`]);
      } finally {
        await stop(plain);
      }
    },
    scaled(60_000),
  );

  it('a gateway config whose prefixes collide → exit 2 naming both upstreams and the flag', async () => {
    const file = join(dir, 'collide.json');
    writeFileSync(
      file,
      JSON.stringify({ upstreams: { a: everythingStdio, b: everythingStdio }, federation: { prefixes: { a: 'x_', b: 'x_' } } }),
    );
    const r = await runCli(['--config', file, '--port', '0', '--federate']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("federation.prefixes.b: upstreams 'a' and 'b' have the same tool and prompt prefix 'x_' on /mcp");
    expect(r.stderr).toContain('(--federate serves every upstream on POST /mcp: federation.enabled is true whatever the file says)');
    expectNoStackTrace(r.stderr);
  });
});

describe('mcpServers errors', () => {
  it('a server name that cannot be an upstream name → exit 2, the message names the server and suggests a name', async () => {
    const file = join(dir, 'bad-name.json');
    writeFileSync(file, JSON.stringify({ mcpServers: { 'my server': { command: process.execPath, args: [EVERYTHING, 'stdio'] } } }));
    const r = await runCli(['--config', file, '--port', '0']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(file);
    expect(r.stderr).toContain('mcpServers["my server"]: "my server" cannot be an upstream name');
    expect(r.stderr).toContain('for example to "my-server"');
    expectNoStackTrace(r.stderr);
  });
});

describe('envPassthrough', () => {
  let gw: CliGateway;
  const secret = 'not-listed-value-91d4';
  const NODE_FLAGS = '--no-warnings';
  beforeAll(async () => {
    gw = await startCli(
      {
        upstreams: {
          e: { ...everythingStdio, envPassthrough: ['MRTR_PASS_ONE', 'MRTR_GLOB_*'], env: { MRTR_GLOB_B: 'configured-b' } },
          withNodeOptions: { ...everythingStdio, envPassthrough: ['NODE_OPTIONS'] },
        },
      },
      undefined,
      // NODE_OPTIONS holds a flag of the gateway's own (harmless here: it only silences warnings).
      {
        MRTR_PASS_ONE: 'pass-one-3a7b',
        MRTR_GLOB_A: 'glob-a-3a7b',
        MRTR_GLOB_B: 'glob-b-from-env',
        MRTR_NOT_LISTED: secret,
        NODE_OPTIONS: NODE_FLAGS,
      },
    );
  }, scaled(60_000));
  afterAll(() => stop(gw));

  it('passes the listed variables and prefix matches to the stdio child; env wins; an unlisted variable is absent', async () => {
    const env = await childEnv(`${gw.base}/mcp/e`);
    expect(env.MRTR_PASS_ONE).toBe('pass-one-3a7b');
    expect(env.MRTR_GLOB_A).toBe('glob-a-3a7b');
    expect(env.MRTR_GLOB_B).toBe('configured-b');
    expect(env.MRTR_NOT_LISTED).toBeUndefined();
    expect(env.PATH).toBe(process.env.PATH);
  });

  it("NODE_OPTIONS is not in the safe set: the gateway's Node flags reach a child only through envPassthrough", async () => {
    expect((await childEnv(`${gw.base}/mcp/e`)).NODE_OPTIONS).toBeUndefined();
    expect((await childEnv(`${gw.base}/mcp/withNodeOptions`)).NODE_OPTIONS).toBe(NODE_FLAGS);
  });

  it('logs the names the child gets beyond the safe set at start, without values', () => {
    const line = gw.logs.find((l) => l.upstream === 'e' && Array.isArray(l.env));
    expect(line).toMatchObject({
      level: 30,
      env: ['MRTR_GLOB_A', 'MRTR_GLOB_B', 'MRTR_PASS_ONE'],
      passedThrough: ['MRTR_GLOB_A', 'MRTR_PASS_ONE'],
    });
    const all = JSON.stringify(gw.logs);
    for (const v of ['pass-one-3a7b', 'glob-a-3a7b', 'configured-b', secret]) expect(all).not.toContain(v);
  });
});

describe('the bin launcher (npx mrtr-gateway)', () => {
  it('--help lists every flag, the environment variables and the exit codes, and exits 0', async () => {
    const r = await runCli(['--help'], { entry: [BIN], cwd: dir });
    expect(r.code).toBe(0);
    for (const flag of ['-c, --config PATH', '-p, --port N', '--host H', '--federate', '-h, --help']) expect(r.stdout).toContain(flag);
    for (const name of ['PORT', 'HOST', 'LOG_LEVEL', '${NAME}', 'envPassthrough', ...OTEL_VARS]) expect(r.stdout).toContain(name);
    expect(r.stdout).toMatch(/Commands:\n {2}check {2,}check the config without serving/);
    expect(r.stdout).toContain('mcpServers');
    expect(r.stdout).toMatch(/Exit codes:\n {2}0 {2}.+\n {2}1 {2}.+\n {2}2 {2}.+/);
  });

  it('a port that is not a decimal integer from 0 to 65535 → exit 2 naming it', async () => {
    const file = join(dir, 'port.json');
    writeFileSync(file, JSON.stringify({ upstreams: { e: everythingStdio } }));
    for (const port of ['0x50', '1e3', '65536', '']) {
      const r = await runCli(['--config', file, '--port', port], { entry: [BIN], cwd: dir });
      expect(r.code).toBe(2);
      expect(r.stderr).toContain(`--port/PORT must be a decimal integer from 0 to 65535, got '${port}'`);
    }
  });

  it('a port another process listens on → exit 1 with EADDRINUSE and what to do', async () => {
    const taken = createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
    try {
      const file = join(dir, 'taken.json');
      writeFileSync(file, JSON.stringify({ upstreams: { e: everythingStdio } }));
      const r = await runCli(['--config', file, '--port', String((taken.address() as AddressInfo).port)], { entry: [BIN], cwd: dir });
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(
        /cannot listen on 127\.0\.0\.1:\d+: EADDRINUSE \(another process is listening there .*choose another port with --port or PORT\)/,
      );
      expectNoStackTrace(r.stderr);
    } finally {
      taken.close();
    }
  });

  it('a duration longer than a timer can wait → exit 2 naming the field and the limit', async () => {
    const file = join(dir, 'long-ttl.json');
    writeFileSync(file, JSON.stringify({ requestState: { ttlMs: 99_999_999_999 }, upstreams: { e: everythingStdio } }));
    const r = await runCli(['--config', file], { entry: [BIN], cwd: dir });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('requestState.ttlMs');
    expect(r.stderr).toContain('at most 2147483647 ms');
  });

  it('an unknown flag → exit 2 with the usage line', async () => {
    const r = await runCli(['--bogus'], { entry: [BIN], cwd: dir });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('usage: mrtr-gateway');
  });

  it('a value without its flag (npm start --port 18811, npm took the flag) → exit 2 with the hint to put flags after --, under npm only', async () => {
    const r = await runCli(['18811'], { entry: [BIN], cwd: dir, env: { npm_lifecycle_event: 'start' } });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("Unexpected argument '18811'");
    expect(r.stderr).toContain('flags for the gateway go after `--` with npm start, for example: npm start -- --port 9000');
    expect(r.stderr).toContain('usage: mrtr-gateway');
    const direct = await runCli(['18811'], { entry: [BIN], cwd: dir, env: { npm_lifecycle_event: undefined } });
    expect(direct.code).toBe(2);
    expect(direct.stderr).toContain("Unexpected argument '18811'");
    expect(direct.stderr).not.toContain('npm start');
  });

  it('no configuration file in the working directory → exit 2 naming the absolute path looked at', async () => {
    const empty = mkdtempSync(join(dir, 'no-config-'));
    const r = await runCli([], { entry: [BIN], cwd: empty });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`gateway.config.json: cannot read ${join(empty, 'gateway.config.json')} (ENOENT)`);
    expectNoStackTrace(r.stderr);
  });

  it(
    'runs from another working directory with a relative --config, serves, and stops with exit 0 on SIGTERM',
    async () => {
      await serveFromElsewhere(BIN, 'from elsewhere');
    },
    scaled(60_000),
  );
});

/**
 * A copy of the package's files with `node_modules` linking every installed package but those of
 * `without`. A production install (`withDist`: `dist/` compiled from the sources as `npm run build`
 * does) lacks the development dependencies tsx and TypeScript, as `npm ci --omit=dev` leaves it.
 */
function packageTree(parent: string, prefix: string, opts: { withDist?: boolean; without?: string[] } = {}): string {
  const root = mkdtempSync(join(parent, prefix));
  for (const f of ['bin', 'src', 'config', 'package.json', 'tsconfig.json']) cpSync(join(ROOT, f), join(root, f), { recursive: true });
  mkdirSync(join(root, 'node_modules'));
  const without = new Set(['.bin', '.cache', ...(opts.without ?? [])]);
  for (const name of readdirSync(join(ROOT, 'node_modules'))) {
    if (!without.has(name)) symlinkSync(join(ROOT, 'node_modules', name), join(root, 'node_modules', name));
  }
  if (opts.withDist) {
    execFileSync(
      process.execPath,
      [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(ROOT, 'tsconfig.build.json'), '--outDir', join(root, 'dist')],
      { stdio: 'pipe', timeout: 150_000 },
    );
  }
  return root;
}

function productionTree(parent: string, withDist: boolean): string {
  return packageTree(parent, withDist ? 'prod-' : 'prod-nodist-', { withDist, without: ['tsx', 'typescript'] });
}

/** Whether `specifier` resolves for a module in `dir`, as the launcher checks it. */
function resolvesFrom(dir: string, specifier: string): boolean {
  const probe = join(dir, 'probe.mjs');
  writeFileSync(probe, `try { import.meta.resolve(${JSON.stringify(specifier)}); process.exit(0); } catch { process.exit(3); }`);
  try {
    execFileSync(process.execPath, [probe], { stdio: 'pipe' });
    return true;
  } catch {
    return false;
  } finally {
    rmSync(probe);
  }
}

describe('the bin launcher in a checkout: the sources compiled under node_modules/.cache', () => {
  let tree: string;
  const bin = () => join(tree, 'bin/mrtr-gateway.js');
  beforeAll(() => {
    tree = packageTree(dir, 'checkout-', { without: ['tsx'] });
  });

  it('runs what the sources say now: a source edited after a start is compiled again before the next one', async () => {
    const first = await runCli(['--help'], { entry: [bin()], cwd: dir });
    expect(first.code).toBe(0);
    expect(first.stdout).toContain('Serves MCP servers');
    const main = join(tree, 'src/main.ts');
    writeFileSync(main, readFileSync(main, 'utf8').replace('Serves MCP servers', 'Edited: serves MCP servers'));
    const second = await runCli(['--help'], { entry: [bin()], cwd: dir });
    expect(second.code).toBe(0);
    expect(second.stdout).toContain('Edited: serves MCP servers');
  });

  it(
    'serves from the compiled sources: a tools/call through a stdio upstream, then exit 0 on SIGTERM',
    async () => {
      await serveFromElsewhere(bin(), 'from the compiled sources');
    },
    scaled(60_000),
  );

  it('a cold cache: one line on stderr says the sources are compiling; an edit of one file compiles without it', async () => {
    const cold = packageTree(dir, 'cold-', { without: ['tsx'] });
    const first = await runCli(['--help'], { entry: [join(cold, 'bin/mrtr-gateway.js')], cwd: dir });
    expect(first.code).toBe(0);
    expect(first.stderr).toBe('mrtr-gateway: compiling the sources (first start after install or an edit)…\n');
    const main = join(cold, 'src/main.ts');
    writeFileSync(main, readFileSync(main, 'utf8').replace('Serves MCP servers', 'Edited: serves MCP servers'));
    const second = await runCli(['--help'], { entry: [join(cold, 'bin/mrtr-gateway.js')], cwd: dir });
    expect(second.code).toBe(0);
    expect(second.stdout).toContain('Edited: serves MCP servers');
    expect(second.stderr).toBe('');
  });

  it(
    'a cache directory that cannot be written (EPERM) → one warning line, the sources run through tsx: --help and a tools/call',
    async () => {
      const readOnly = packageTree(dir, 'ro-cache-');
      // /sys refuses new directories even to root.
      symlinkSync('/sys', join(readOnly, 'node_modules/.cache'));
      const r = await runCli(['--help'], { entry: [join(readOnly, 'bin/mrtr-gateway.js')], cwd: dir });
      expect(r.code).toBe(0);
      expect(r.stdout).toContain('Serves MCP servers');
      expect(r.stderr).toMatch(
        /^mrtr-gateway: warning: cannot write the compiled sources \(EPERM on .+\); running the sources through tsx, which starts slower\n$/,
      );
      await serveFromElsewhere(join(readOnly, 'bin/mrtr-gateway.js'), 'through tsx');
    },
    scaled(60_000),
  );

  it('a source that does not compile → exit 1 with one line naming the file and the position, no stack trace', async () => {
    const broken = packageTree(dir, 'broken-', { without: ['tsx'] });
    writeFileSync(join(broken, 'src/config/log-levels.ts'), 'export const LOG_LEVELS = [;\n');
    const r = await runCli(['--help'], { entry: [join(broken, 'bin/mrtr-gateway.js')], cwd: dir });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    // A fresh tree compiles every file: the line saying so comes first.
    expect(r.stderr).toMatch(
      /^mrtr-gateway: compiling the sources \(first start after install or an edit\)…\nmrtr-gateway: cannot compile the sources: src\/config\/log-levels\.ts:1:\d+: .+\n$/,
    );
  });
});

describe('the bin launcher in a production install (no tsx, no TypeScript)', () => {
  let prod: string;
  beforeAll(() => {
    prod = productionTree(dir, true);
  }, scaled(180_000));

  it('TypeScript does not resolve there, as after npm ci --omit=dev (the dev checkout does resolve it)', () => {
    expect(resolvesFrom(join(prod, 'bin'), 'typescript')).toBe(false);
    expect(resolvesFrom(join(ROOT, 'bin'), 'typescript')).toBe(true);
  });

  it('--help runs from dist/ and lists the flags and the OTEL_* variables', async () => {
    const r = await runCli(['--help'], { entry: [join(prod, 'bin/mrtr-gateway.js')], cwd: dir });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    for (const flag of ['-c, --config PATH', '-p, --port N', '--host H', '-h, --help']) expect(r.stdout).toContain(flag);
    for (const name of OTEL_VARS) expect(r.stdout).toContain(name);
  });

  it('--help needs none of the packages the gateway loads: it is answered without node_modules', async () => {
    const bare = mkdtempSync(join(dir, 'no-modules-'));
    for (const f of ['bin', 'dist', 'package.json']) cpSync(join(prod, f), join(bare, f), { recursive: true });
    const r = await runCli(['--help'], { entry: [join(bare, 'bin/mrtr-gateway.js')], cwd: dir });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('-c, --config PATH');
  });

  it(
    'serves from dist/: a tools/call through a stdio upstream, then exit 0 on SIGTERM',
    async () => {
      await serveFromElsewhere(join(prod, 'bin/mrtr-gateway.js'), 'from dist');
    },
    scaled(60_000),
  );

  it('neither dist/ nor TypeScript → exit 1 with one line on stderr saying what to run', async () => {
    const bare = productionTree(dir, false);
    const r = await runCli(['--help'], { entry: [join(bare, 'bin/mrtr-gateway.js')], cwd: dir });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(
      `mrtr-gateway: cannot start: ${join(bare, 'dist/main.js')} is missing (build it with npm run build) and TypeScript is not installed to compile the sources (install the development dependencies with npm ci)\n`,
    );
  });
});
