/**
 * Asking a 2026-07-28 upstream `server/discover` (2026-07-28 server/discover) with the gateway's
 * own envelope, within a budget: the era probe of a `protocol: "auto"` upstream ({@link probeModern})
 * and the start of one pinned to 2026-07-28 ({@link startModern}), over the hop of
 * src/upstream/modern.ts.
 */
import { PROTOCOL_VERSION } from '../protocol/wire.js';
import { gatewayEnvelope, ModernHopError, type ModernResponse, type ModernUpstream } from './modern.js';

/**
 * Asks `server/discover` (2026-07-28 server/discover) with the gateway's own envelope, waiting at
 * most `timeoutMs` for the answer.
 * @throws ModernHopError `timeout` when none came within `timeoutMs` (the request is cancelled
 *   upstream), or the request's own failure (unreachable, crashed, protocol).
 */
async function discoverWithin(up: ModernUpstream, timeoutMs: number, hopHeaders?: Record<string, string>): Promise<ModernResponse> {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort('timeout'), timeoutMs);
  try {
    return await up.request('server/discover', { _meta: gatewayEnvelope() }, { signal: ac.signal, hopHeaders });
  } catch (e) {
    if (ac.signal.aborted && e instanceof ModernHopError && (e.reason === 'cancelled' || e.reason === 'timeout')) {
      throw new ModernHopError('timeout', `no answer to server/discover within ${timeoutMs} ms`, e.stderr);
    }
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Starts an upstream pinned to 2026-07-28 (`protocol: "2026-07-28"`): its first answer, to a
 * `server/discover`, must come within `timeoutMs` (`timeouts.connectMs`). Over stdio the request
 * spawns the child, so the budget covers the spawn and the first answer; over Streamable HTTP it
 * covers connecting and the first answer. Any answer, a JSON-RPC error too, shows the upstream up.
 * @throws ModernHopError `timeout` when no answer came in time; `unreachable`, `crashed` or
 *   `protocol` when the request failed.
 */
export async function startModern(up: ModernUpstream, timeoutMs: number): Promise<void> {
  await discoverWithin(up, timeoutMs);
}

/**
 * Asks `server/discover` (2026-07-28 server/discover) to learn the upstream's era: resolves with the
 * DiscoverResult when it lists 2026-07-28 among `supportedVersions`, or undefined for a legacy
 * upstream (any JSON-RPC error, or an HTTP 4xx from a legacy server that wants `initialize`).
 * With `silenceIsLegacy` (HTTP), no answer within `timeoutMs` counts as legacy too; without it
 * (stdio, where `timeoutMs` is the whole start budget of the child) it is a start `timeout`.
 * @throws ModernHopError `timeout` when no answer came within `timeoutMs` and silence does not
 *   count as legacy; `unreachable`, `crashed` or `protocol` when the upstream cannot be asked
 *   (`unreachable` with `status` 401 or 403 when it refused the credential sent, or its absence).
 * `hopHeaders`: the first caller's credential headers, for an upstream that wants each user's own token.
 */
export async function probeModern(
  up: ModernUpstream,
  timeoutMs: number,
  silenceIsLegacy = true,
  hopHeaders?: Record<string, string>,
): Promise<Record<string, unknown> | undefined> {
  try {
    const r = await discoverWithin(up, timeoutMs, hopHeaders);
    if ('error' in r) {
      if (r.httpStatus === 401 || r.httpStatus === 403)
        throw new ModernHopError('unreachable', `HTTP ${r.httpStatus} from the upstream`, [], r.httpStatus);
      return undefined;
    }
    const versions = r.result.supportedVersions;
    return Array.isArray(versions) && versions.includes(PROTOCOL_VERSION) ? r.result : undefined;
  } catch (e) {
    // A legacy HTTP server may leave an unknown method unanswered: there, silence means legacy.
    if (silenceIsLegacy && e instanceof ModernHopError && (e.reason === 'cancelled' || e.reason === 'timeout')) return undefined;
    // HTTP 401/403 refuses the credential (or its absence), and says nothing of the era.
    if (e instanceof ModernHopError && (e.status === 401 || e.status === 403)) throw e;
    if (e instanceof ModernHopError && e.reason === 'unreachable' && /HTTP 4\d\d/.test(e.message)) return undefined;
    throw e;
  }
}
