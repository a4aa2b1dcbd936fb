/**
 * The load generator: autocannon, used as a library. Every response body goes through a check,
 * and a run that saw any connection error, timeout, non-2xx status or failed check throws, so a
 * fast failure never passes for a fast success.
 *
 * Latency percentiles are computed here from each response's own time (autocannon's 'response'
 * event, high-resolution ms), since autocannon's histogram rounds to whole milliseconds.
 * Requests per second are completed 2xx responses over the time from the start to the last
 * response.
 */
import autocannon from 'autocannon';
import { percentile } from './stats.js';
import type { RawRequest } from './mcp.js';

/** What one load run measured. */
export interface LoadResult {
  p50: number;
  p99: number;
  rps: number;
  count: number;
  elapsedMs: number;
}

/** Options of one load run: a fixed duration (`seconds`) or a fixed number of requests (`amount`). */
export interface LoadOptions {
  label: string;
  request: RawRequest;
  connections: number;
  seconds?: number;
  amount?: number;
  /** True when the body is a successful answer. */
  check: (body: string) => boolean;
  /** Called with each response body (after the check). */
  onBody?: (body: string) => void;
  /** Changes each request before it is sent (for request sequences over a list, e.g. task ids). */
  setup?: (req: { headers?: Record<string, string>; body?: string | Buffer }) => {
    headers?: Record<string, string>;
    body?: string | Buffer;
  };
}

/**
 * Runs one load run. A run by duration that ended before any response arrived, without any error,
 * measured nothing (the machine stalled for longer than the run): it is run once more with one
 * request per connection instead.
 * @throws Error naming the run and what failed (connection errors, timeouts, non-2xx, failed checks).
 */
export async function load(opts: LoadOptions): Promise<LoadResult> {
  try {
    return await loadOnce(opts);
  } catch (e) {
    if (!(e instanceof NothingMeasured)) throw e;
    return loadOnce({ ...opts, seconds: undefined, amount: opts.connections });
  }
}

/** A run by duration that saw no response and no error. */
class NothingMeasured extends Error {}

function loadOnce(opts: LoadOptions): Promise<LoadResult> {
  const url = new URL(opts.request.url);
  const latencies: number[] = [];
  let firstBad: string | undefined;
  let lastResponseAt = 0;
  return new Promise<LoadResult>((resolve, reject) => {
    const started = performance.now();
    const instance = autocannon(
      {
        url: url.origin,
        connections: opts.connections,
        ...(opts.amount !== undefined ? { amount: opts.amount } : { duration: opts.seconds ?? 1 }),
        // Check for the end every 100 ms rather than every second, so short runs end on time.
        sampleInt: 100,
        timeout: 30,
        idReplacement: true,
        requests: [
          {
            method: 'POST',
            path: url.pathname + url.search,
            headers: opts.request.headers,
            body: opts.request.body,
            ...(opts.setup ? { setupRequest: opts.setup as never } : {}),
          },
        ],
        verifyBody: (body: unknown) => {
          const text = String(body);
          const ok = opts.check(text);
          if (!ok && firstBad === undefined) firstBad = text.slice(0, 600);
          opts.onBody?.(text);
          return ok;
        },
      },
      (err, r) => {
        if (err) return reject(new Error(`${opts.label}: autocannon failed: ${String(err)}`));
        const problems = [
          r.errors ? `${r.errors} connection errors` : '',
          r.timeouts ? `${r.timeouts} timeouts` : '',
          r.non2xx ? `${r.non2xx} non-2xx responses` : '',
          r.mismatches ? `${r.mismatches} responses that failed the check` : '',
          r['2xx'] === 0 ? 'no successful response' : '',
          opts.amount !== undefined && r['2xx'] !== opts.amount ? `${r['2xx']} of ${opts.amount} requests answered` : '',
        ].filter(Boolean);
        if (problems.length === 1 && r['2xx'] === 0 && opts.amount === undefined) {
          return reject(new NothingMeasured(`${opts.label}: no response within the run`));
        }
        if (problems.length) {
          return reject(new Error(`${opts.label}: ${problems.join(', ')}${firstBad !== undefined ? `; first bad body: ${firstBad}` : ''}`));
        }
        latencies.sort((a, b) => a - b);
        const elapsedMs = lastResponseAt - started;
        resolve({
          p50: percentile(latencies, 50),
          p99: percentile(latencies, 99),
          rps: (latencies.length / elapsedMs) * 1000,
          count: latencies.length,
          elapsedMs,
        });
      },
    );
    instance.on('response', (_client, status, _bytes, responseTime) => {
      if (status >= 200 && status < 300) {
        latencies.push(responseTime);
        lastResponseAt = performance.now();
      }
    });
  });
}
