/**
 * A gateway in its own process, for the benchmark: started like the tests start one
 * (test/helpers/gateway.ts: the real `Gateway` and HTTP front door, on 127.0.0.1 with an
 * ephemeral port, logging off), and steered over IPC so the benchmark can read this process's
 * memory after a full garbage collection.
 *
 *   fork('bench/gateway-process.ts', [], { execArgv: ['--import', 'tsx', '--expose-gc'] })
 *
 * Messages in: `{id, op: 'start', config}`, `{id, op: 'memory'}`, `{id, op: 'stats'}`,
 * `{id, op: 'stop'}`. Each is answered with `{id, ok: true, ...}` or `{id, ok: false, error}`.
 */
import { startGateway, type TestGateway } from '../test/helpers/gateway.js';

type Message = { id: number; op: 'start'; config: Record<string, unknown> } | { id: number; op: 'memory' | 'stats' | 'stop' };

let gw: TestGateway | undefined;

function reply(msg: Record<string, unknown>): void {
  process.send?.(msg);
}

/** Full collection (twice, with a turn of the event loop between, so finalizers run), then the numbers. */
async function memory(): Promise<NodeJS.MemoryUsage> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('start this process with --expose-gc');
  gc();
  await new Promise((r) => setImmediate(r));
  gc();
  return process.memoryUsage();
}

function stats(): Record<string, unknown> {
  if (!gw) throw new Error('gateway not started');
  const pools: Record<string, unknown> = {};
  for (const [name, up] of gw.gateway.upstreams) pools[name] = up.pool.stats();
  return { parked: gw.gateway.bridge.parkedCount, tasksRunning: gw.gateway.tasks.running, pools };
}

async function handle(m: Message): Promise<Record<string, unknown>> {
  switch (m.op) {
    case 'start':
      if (gw) throw new Error('already started');
      gw = await startGateway(m.config);
      return { base: gw.base };
    case 'memory':
      return { memory: await memory() };
    case 'stats':
      return stats();
    case 'stop':
      await gw?.close();
      gw = undefined;
      setImmediate(() => process.exit(0));
      return {};
  }
}

process.on('message', (m: Message) => {
  handle(m).then(
    (out) => reply({ id: m.id, ok: true, ...out }),
    (e: Error) => reply({ id: m.id, ok: false, error: e.stack ?? e.message }),
  );
});

// The benchmark went away: stop the upstream sessions (and stdio children) before leaving.
process.on('disconnect', () => {
  const done = () => process.exit(0);
  setTimeout(done, 3000).unref();
  void (gw?.close() ?? Promise.resolve()).finally(done);
});
