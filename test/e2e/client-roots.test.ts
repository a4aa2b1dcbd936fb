/**
 * Each call runs with its own client's roots: two 2026-07-28 clients of one principal with
 * different roots, through one gateway, on sessions that are started cold and reused warm. A
 * server that holds roots for the session (server-everything caches what it got; server-filesystem
 * replaces its allowed directories with them) is told `notifications/roots/list_changed` before a
 * call that needs its own roots, and its `roots/list` is asked of that call's client first.
 */
import { mkdtempSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { everythingStdio, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startEverythingHttp, type SpawnedServer } from '../helpers/processes.js';
import { textOf, v2Client } from '../helpers/v2client.js';
import { scaled } from '../helpers/budget.js';

const gateways: TestGateway[] = [];
const servers: SpawnedServer[] = [];
afterAll(async () => {
  await Promise.all(gateways.map((g) => g.close()));
  await Promise.all(servers.map((s) => s.stop()));
});
async function gateway(raw: Record<string, unknown>): Promise<TestGateway> {
  const g = await startGateway(raw);
  gateways.push(g);
  return g;
}

const ROOTS = { roots: {} };
const rootsOf = (who: string) => [{ uri: `file:///work/${who}`, name: who }];

const transports: [string, () => Promise<Record<string, unknown>>][] = [
  ['stdio', async () => everythingStdio],
  [
    'streamable-http',
    async () => {
      const srv = await startEverythingHttp();
      servers.push(srv);
      return { transport: 'streamable-http', url: `http://127.0.0.1:${srv.port}/mcp` };
    },
  ],
];

describe.each(transports)('server-everything over %s: get-roots-list', (_label, upstream) => {
  it('returns the roots of the calling client on every call, cold and warm, with two clients of one principal', async () => {
    const gw = await gateway({ upstreams: { everything: await upstream() } });
    const url = gw.url('everything');
    const alice = await v2Client(url, { roots: rootsOf('alice') }, ROOTS);
    const bob = await v2Client(url, { roots: rootsOf('bob') }, ROOTS);
    const roots = async (c: typeof alice) => textOf((await c.client.callTool({ name: 'get-roots-list', arguments: {} })) as never);
    try {
      // Cold: both at once, each on a new session.
      const [a, b] = await Promise.all([roots(alice), roots(bob)]);
      expect(a).toContain('file:///work/alice');
      expect(a).not.toContain('bob');
      expect(b).toContain('file:///work/bob');
      expect(b).not.toContain('alice');
      // Warm: the sessions are reused by either client, one after the other.
      for (const [c, who, other] of [
        [alice, 'alice', 'bob'],
        [bob, 'bob', 'alice'],
        [bob, 'bob', 'alice'],
        [alice, 'alice', 'bob'],
      ] as const) {
        const text = await roots(c);
        expect(text, who).toContain(`file:///work/${who}`);
        expect(text, who).not.toContain(other);
      }
      expect(alice.record.roots).toBeGreaterThanOrEqual(3);
      expect(bob.record.roots).toBeGreaterThanOrEqual(3);
    } finally {
      await alice.client.close();
      await bob.client.close();
    }
  });
});

describe('server-filesystem (it replaces its allowed directories with the roots it gets)', () => {
  it(
    "list_allowed_directories shows the calling client's roots, or the configured ones for a client without roots, 20 runs in a row",
    async () => {
      const dir = (name: string) => realpathSync(mkdtempSync(join(tmpdir(), `mrtr-roots-${name}-`)));
      const configured = dir('configured');
      const commandLine = dir('argv');
      const mine = { alice: dir('alice'), bob: dir('bob') };
      const server = fileURLToPath(new URL('../../node_modules/@modelcontextprotocol/server-filesystem/dist/index.js', import.meta.url));
      const gw = await gateway({
        upstreams: {
          fs: {
            transport: 'stdio',
            command: process.execPath,
            args: [server, commandLine],
            roots: [{ uri: `file://${configured}`, name: 'configured' }],
            maxSessions: 6,
          },
        },
      });
      const url = gw.url('fs');
      const alice = await v2Client(url, { roots: [{ uri: `file://${mine.alice}`, name: 'alice' }] }, ROOTS);
      const bob = await v2Client(url, { roots: [{ uri: `file://${mine.bob}`, name: 'bob' }] }, ROOTS);
      const plain = await v2Client(url, {}, {});
      const all = { alice: mine.alice, bob: mine.bob, plain: configured };
      const list = async (who: keyof typeof all, c: typeof alice) => ({
        who,
        text: textOf((await c.client.callTool({ name: 'list_allowed_directories', arguments: {} })) as never),
      });
      try {
        for (let run = 0; run < 20; run++) {
          // At once (three sessions, reused by whichever client comes), then one after the other.
          const got = [
            ...(await Promise.all([list('alice', alice), list('bob', bob), list('plain', plain)])),
            await list('bob', bob),
            await list('plain', plain),
            await list('alice', alice),
          ];
          for (const { who, text } of got) {
            for (const [name, path] of Object.entries(all)) {
              if (name === who) expect(text, `run ${run}: ${who}`).toContain(path);
              else expect(text, `run ${run}: ${who}`).not.toContain(path);
            }
            expect(text, `run ${run}: ${who}`).not.toContain(commandLine);
          }
        }
      } finally {
        await Promise.all([alice.client.close(), bob.client.close(), plain.client.close()]);
      }
    },
    scaled(120_000),
  );
});
