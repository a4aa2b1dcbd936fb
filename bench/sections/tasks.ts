/**
 * Figure 5: tasks. A gateway process in front of the Streamable HTTP fixture with
 * `tasks.taskAfterMs: 0`, so every `tools/call` of a client that declares the tasks extension
 * becomes a task at once. The tool is `sleep` (`ms` long enough that every task is still working
 * while it is created and polled).
 *
 * A warm-up batch opens one upstream session per concurrent task first, so the timed batches
 * reuse warm sessions and measure the task machinery rather than session set-up. Each run has
 * two batches, and the timed batches of all runs come first. A timed batch: create N tasks
 * (autocannon, fixed amount), poll each once with tasks/get (Mcp-Name = taskId), check that
 * every task completed with the tool's result, then make N plain `echo` calls (no task) at the
 * same concurrency, the reference for what a task adds to the call it wraps. A memory batch (its forced GCs would slow a batch
 * after them): read memory, create N tasks, read memory (tasks running), wait until the gateway
 * reports no running task, read memory again (records only: the sessions are back to idle), then
 * check every result.
 */
import { load } from '../lib/load.js';
import { modern, send, TASKS_CAPS, textOf } from '../lib/mcp.js';
import { GatewayProcess, startEchoHttp } from '../lib/procs.js';
import { figure, type Figure } from '../lib/stats.js';
import { benchLimits, sessions } from './config.js';
import { modernEcho, modernEchoCheck } from './passthrough.js';

export interface TaskFigures {
  count: number;
  sleepMs: number;
  createMs: Figure;
  createPerSec: Figure;
  /** The same number of plain `echo` calls (no task), same gateway and concurrency: what a task wraps. */
  echoMs: Figure;
  pollMs: Figure;
  pollPerSec: Figure;
  heapPerRunning: Figure;
  rssPerRunning: Figure;
  heapPerRecord: Figure;
  rssPerRecord: Figure;
  /** Status counts seen by the timed poll, over all runs. */
  statuses: Record<string, number>;
}

const PLACEHOLDER = 'TASK_ID_PLACEHOLDER';

async function pool<T>(items: T[], concurrency: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, items.length) }, async () => {
      while (next < items.length) await fn(items[next++]!);
    }),
  );
}

/** @param opts.root another checkout to run the gateway from (the baseline). */
export async function measureTasks(
  count: number,
  sleepMs: number,
  runs: number,
  log: (s: string) => void,
  opts: { root?: string; label?: string } = {},
): Promise<TaskFigures> {
  const fixture = await startEchoHttp();
  const gw = await GatewayProcess.start(
    `${opts.label ?? 'gateway'} (tasks)`,
    {
      limits: benchLimits,
      upstreams: { http: { transport: 'streamable-http', url: fixture.url, ...sessions(count + 64), tasks: { taskAfterMs: 0 } } },
    },
    { root: opts.root },
  );
  const statuses: Record<string, number> = {};
  const s = {
    createMs: [] as number[],
    createPerSec: [] as number[],
    echoMs: [] as number[],
    pollMs: [] as number[],
    pollPerSec: [] as number[],
    heapRun: [] as number[],
    rssRun: [] as number[],
    heapRec: [] as number[],
    rssRec: [] as number[],
  };
  try {
    const url = gw.url('http');
    const connections = Math.min(32, count);

    const createBatch = async (label: string): Promise<{ ids: string[]; ms: number; finishedBy: number }> => {
      const ids: string[] = [];
      const r = await load({
        label,
        request: modern(url, 'tools/call', { name: 'sleep', arguments: { ms: sleepMs } }, TASKS_CAPS),
        connections,
        amount: count,
        check: (b) =>
          b.includes('"resultType":"task"') && b.includes('"taskId"') && b.includes('"status":"working"') && !b.includes('"error"'),
        onBody: (b) => {
          const id = JSON.parse(b)?.result?.taskId;
          if (typeof id === 'string') ids.push(id);
        },
      });
      if (new Set(ids).size !== count) throw new Error(`${label}: ${new Set(ids).size} distinct task ids for ${count} calls`);
      return { ids, ms: r.elapsedMs, finishedBy: performance.now() + sleepMs };
    };

    /** Waits until every task completed with the tool's own result. */
    const verifyCompleted = async (ids: string[], finishedBy: number): Promise<void> => {
      await new Promise((r) => setTimeout(r, Math.max(0, finishedBy - performance.now()) + 50));
      const deadline = performance.now() + 30_000 + sleepMs;
      let open = ids;
      while (open.length) {
        const still: string[] = [];
        await pool(open, 16, async (taskId) => {
          const t = (await send(modern(url, 'tasks/get', { taskId }, TASKS_CAPS), `v-${taskId}`)).message.result;
          if (t.status === 'working') return void still.push(taskId);
          if (t.resultType !== 'complete' || t.status !== 'completed' || textOf(t.result) !== `slept ${sleepMs} ms`) {
            throw new Error(`task ${taskId} ended badly: ${JSON.stringify(t)}`);
          }
        });
        open = still;
        if (open.length && performance.now() > deadline)
          throw new Error(`${open.length} tasks still working long after their tool should have returned`);
        if (open.length) await new Promise((r) => setTimeout(r, 100));
      }
    };

    // Warm-up: opens the sessions the timed batches will reuse.
    log(`  warm-up: ${count} tasks (opens up to ${count} upstream sessions)`);
    const warm = await createBatch('tasks warm-up');
    await verifyCompleted(warm.ids, warm.finishedBy);

    // The timed batches first, with no forced collection before them: after a full GC (as the
    // memory readings need) V8 sets a low limit for the old generation, and the next batch pays
    // for a whole mark-compact of the running tasks; the memory figures come from batches of
    // their own, after these.
    const timed: { created: { ids: string[]; ms: number }; poll: { elapsedMs: number }; running: number; echoMs: number }[] = [];
    for (let run = 1; run <= runs; run++) {
      const created = await createBatch(`create ${count} tasks, run ${run}`);
      let next = 0;
      const polled = new Set<string>();
      const poll = await load({
        label: `poll ${count} tasks once, run ${run}`,
        request: modern(url, 'tasks/get', { taskId: PLACEHOLDER }, TASKS_CAPS),
        connections,
        amount: count,
        setup: (req) => {
          const id = created.ids[next++]!;
          return {
            ...req,
            headers: { ...req.headers, 'mcp-name': id },
            body: String(req.body).replace(`"${PLACEHOLDER}"`, JSON.stringify(id)),
          };
        },
        check: (b) => b.includes('"resultType":"complete"') && b.includes('"taskId"') && !b.includes('"error"'),
        onBody: (b) => {
          const t = JSON.parse(b)?.result;
          if (typeof t?.taskId === 'string') polled.add(t.taskId);
          statuses[t?.status ?? '?'] = (statuses[t?.status ?? '?'] ?? 0) + 1;
        },
      });
      if (polled.size !== count) throw new Error(`poll run ${run}: ${polled.size} distinct tasks answered for ${count} tasks/get`);
      const stats = await gw.stats();
      await verifyCompleted(created.ids, created.finishedBy);
      // The call a task wraps, without the task: as many `echo` calls at the same concurrency.
      const echo = await load({
        label: `${count} echo calls, run ${run}`,
        request: modernEcho(url),
        connections,
        amount: count,
        check: modernEchoCheck(),
      });
      timed.push({ created, poll, running: stats.tasksRunning, echoMs: echo.elapsedMs });
    }
    for (let run = 1; run <= runs; run++) {
      const { created, poll, running: runningWhenPolled, echoMs } = timed[run - 1]!;
      const before = await gw.memory();
      const measured = await createBatch(`create ${count} tasks for the memory figures, run ${run}`);
      const running = await gw.memory();
      // Wait for the tools to return by the gateway's own count (no request that would add to
      // the heap), read the memory, then check every result.
      await new Promise((r) => setTimeout(r, Math.max(0, measured.finishedBy - performance.now())));
      const idleBy = performance.now() + 30_000;
      while ((await gw.stats()).tasksRunning > 0) {
        if (performance.now() > idleBy) throw new Error('tasks still running 30 s after their tool should have returned');
        await new Promise((r) => setTimeout(r, 50));
      }
      await new Promise((r) => setTimeout(r, 50));
      const after = await gw.memory();
      await verifyCompleted(measured.ids, measured.finishedBy);
      s.createMs.push(created.ms);
      s.createPerSec.push((count / created.ms) * 1000);
      s.echoMs.push(echoMs);
      s.pollMs.push(poll.elapsedMs);
      s.pollPerSec.push((count / poll.elapsedMs) * 1000);
      s.heapRun.push((running.heapUsed - before.heapUsed) / count);
      s.rssRun.push((running.rss - before.rss) / count);
      s.heapRec.push((after.heapUsed - before.heapUsed) / count);
      s.rssRec.push((after.rss - before.rss) / count);
      log(
        `  run ${run}/${runs}: created ${count} in ${created.ms.toFixed(0)} ms (${count} echo calls: ${echoMs.toFixed(0)} ms), polled in ${poll.elapsedMs.toFixed(0)} ms (${runningWhenPolled} running when polled); ` +
          `heap per running task ${((running.heapUsed - before.heapUsed) / count / 1024).toFixed(1)} KiB, per completed record ${((after.heapUsed - before.heapUsed) / count / 1024).toFixed(2)} KiB`,
      );
    }
  } finally {
    await gw.stop();
    await fixture.stop();
  }
  return {
    count,
    sleepMs,
    createMs: figure(s.createMs),
    createPerSec: figure(s.createPerSec),
    echoMs: figure(s.echoMs),
    pollMs: figure(s.pollMs),
    pollPerSec: figure(s.pollPerSec),
    heapPerRunning: figure(s.heapRun),
    rssPerRunning: figure(s.rssRun),
    heapPerRecord: figure(s.heapRec),
    rssPerRecord: figure(s.rssRec),
    statuses,
  };
}
