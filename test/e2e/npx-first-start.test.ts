/**
 * An `mcpServers` entry `npx -y PACKAGE` on a cold npx cache: the first start installs the
 * package, which takes longer than `connectMs`. The package comes from a registry stand-in on
 * 127.0.0.1 (test/helpers/npm-registry.ts) that delays the tarball, into a private
 * `npm_config_cache` per test, both given in the entry's `env`; the package's bin is a
 * dependency-free legacy MCP server (test/fixtures/npx-package). The entry's `"mrtr-gateway"` key
 * sets a small `connectMs` and a `tools` policy.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { rpc } from '../helpers/gateway.js';
import { alive, startCli, type CliGateway } from '../helpers/cli.js';
import { eventually } from '../helpers/fixture.js';
import { scaled } from '../helpers/budget.js';
import { startNpmRegistry, type NpmRegistry } from '../helpers/npm-registry.js';

const PACKAGE_DIR = fileURLToPath(new URL('../fixtures/npx-package', import.meta.url));
/** How long the registry holds the tarball back: the install takes longer than the entry's connectMs. */
const INSTALL_DELAY_MS = 3500;
const CONNECT_MS = 2000;

const gateways: CliGateway[] = [];
const registries: NpmRegistry[] = [];
afterAll(() => {
  for (const g of gateways) if (g.child.exitCode === null && g.child.signalCode === null) g.child.kill('SIGKILL');
  for (const r of registries) r.close();
});

/** A registry serving the fixture package with the tarball delayed, and an empty npx cache of its own. */
async function coldNpx(): Promise<{ reg: NpmRegistry; cache: string }> {
  const reg = await startNpmRegistry(PACKAGE_DIR, INSTALL_DELAY_MS);
  registries.push(reg);
  return { reg, cache: mkdtempSync(join(tmpdir(), 'mrtr-npx-cache-')) };
}

/** The `mcpServers` file of one `npx -y` server (`extra`: more of its "mrtr-gateway" settings). */
function serverList(reg: NpmRegistry, cache: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    mcpServers: {
      pkg: {
        command: 'npx',
        args: ['-y', reg.name],
        // Its own working directory, so that npx finds no package of that name around it.
        cwd: mkdtempSync(join(tmpdir(), 'mrtr-npx-cwd-')),
        env: {
          npm_config_registry: reg.url,
          npm_config_cache: cache,
          npm_config_update_notifier: 'false',
          npm_config_fund: 'false',
          npm_config_audit: 'false',
        },
        'mrtr-gateway': { timeouts: { connectMs: CONNECT_MS }, tools: { deny: ['other'] }, ...extra },
      },
    },
  };
}

async function gatewayFor(config: Record<string, unknown>): Promise<CliGateway> {
  const g = await startCli(config);
  gateways.push(g);
  return g;
}

/** The pid of the npx child the gateway spawned (its era probe), once logged. */
async function npxPid(g: CliGateway): Promise<number> {
  expect(await eventually(() => g.logs.some((l) => l.msg === 'era probe process started (protocol: auto)'), 20_000)).toBe(true);
  return g.logs.find((l) => l.msg === 'era probe process started (protocol: auto)')!.pid as number;
}

/** A fresh gateway on the same cache serves the tool (the install the first one began is complete). */
async function servesFromCache(reg: NpmRegistry, cache: string): Promise<void> {
  const g = await gatewayFor(serverList(reg, cache));
  const r = await rpc(`${g.base}/mcp/pkg`, 'tools/call', { name: 'hello', arguments: {} });
  expect(r.body.error).toBeUndefined();
  expect(r.body.result.content[0].text).toBe('hello from npx');
  // The package was downloaded once: the cache the first gateway's install filled is used as it is.
  expect(reg.tarballRequests()).toBe(1);
  g.child.kill('SIGTERM');
  expect(await g.exited).toEqual({ code: 0, signal: null });
}

describe('an npx -y server on a cold npx cache', () => {
  it(
    'the first call succeeds once the install is done, though it takes longer than connectMs; the entry\'s "mrtr-gateway" settings apply',
    async () => {
      const { reg, cache } = await coldNpx();
      const g = await gatewayFor(serverList(reg, cache));
      const t0 = performance.now();
      const r = await rpc(`${g.base}/mcp/pkg`, 'tools/call', { name: 'hello', arguments: {} });
      const ms = performance.now() - t0;
      expect(r.body.error).toBeUndefined();
      expect(r.body.result.content[0].text).toBe('hello from npx');
      expect(ms).toBeGreaterThan(INSTALL_DELAY_MS);
      expect(reg.tarballRequests()).toBe(1);
      // One npx: the era probe's child went on as the legacy session.
      expect(g.logs.filter((l) => l.msg === 'era probe process started (protocol: auto)')).toHaveLength(1);
      // "mrtr-gateway": {"tools": {"deny": ["other"]}} holds.
      const list = await rpc(`${g.base}/mcp/pkg`, 'tools/list');
      expect(list.body.result.tools.map((t: { name: string }) => t.name)).toEqual(['hello']);
      const denied = await rpc(`${g.base}/mcp/pkg`, 'tools/call', { name: 'other', arguments: {} });
      expect(denied.body.error).toMatchObject({ code: -32602 });
      g.child.kill('SIGTERM');
      expect(await g.exited).toEqual({ code: 0, signal: null });
    },
    scaled(60_000),
  );

  for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
    it(
      `a gateway stopped by ${signal} during the install leaves npx to finish it: a fresh gateway on the same cache serves the call`,
      async () => {
        const { reg, cache } = await coldNpx();
        // required: the gateway starts the upstream at start (readiness), before any call.
        // The install waits for the tarball until the gateway is gone.
        const release = reg.holdTarball();
        const tarball = reg.nextTarballRequest();
        const g = await gatewayFor(serverList(reg, cache, { required: true }));
        const pid = await npxPid(g);
        await tarball;
        g.child.kill(signal);
        const exit = await g.exited;
        expect(exit).toEqual(signal === 'SIGTERM' ? { code: 0, signal: null } : { code: null, signal: 'SIGKILL' });
        if (signal === 'SIGTERM') expect(g.logs.some((l) => /left to finish/.test(l.msg) && l.pid === pid)).toBe(true);
        // npx was not killed: it finishes the install, then its server sees stdin closed and exits.
        expect(alive(pid)).toBe(true);
        release();
        expect(await eventually(() => !alive(pid), INSTALL_DELAY_MS + 15_000)).toBe(true);
        await servesFromCache(reg, cache);
      },
      scaled(60_000),
    );
  }
});
