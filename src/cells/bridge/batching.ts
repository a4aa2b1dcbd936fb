/**
 * When a batch of server-initiated requests is complete. A legacy server that asks several things
 * at once sends them as separate requests; the MRTR and task front ends show them to the client as
 * one set of `inputRequests`. A batch is complete once the upstream went quiet
 * ({@link upstreamQuiet}); what the gateway learns of each upstream's pace ({@link BatchLearning})
 * lengthens that wait for an upstream seen splitting its batches.
 */

/** Event-loop turns without an upstream message after which a batch of input requests is complete. */
export const QUIET_TURNS = 2;

/** Least upstream silence, in ms, that the batches of an upstream seen sending concurrent requests wait for. */
export const SPLIT_QUIET_MS = 5;

/**
 * What the gateway has learned of how one upstream sends a batch of concurrent server-initiated
 * requests (one object per upstream, shared by its Exchanges). Until it has sent one, a batch is
 * complete after two quiet event-loop turns. Once a batch held more than one request, its batches
 * also wait for {@link SPLIT_QUIET_MS} of upstream silence, so a server preempted between two
 * writes is not split. A batch was split when a request arrives while earlier requests of the same
 * call are still unanswered and their round has already gone to the client, within
 * `input.batchWindowMs` of the one before: the wait becomes twice the gap seen plus
 * {@link SPLIT_QUIET_MS} (the largest learned so far; `batchWindowMs` still caps every wait).
 */
export interface BatchLearning {
  /** The learned silence to wait for, in ms (0 until a batch of several requests is seen). */
  quietMs: number;
  /** Called when {@link quietMs} rises, with the new value and whether a split batch showed it. */
  onLearned?: (quietMs: number, split: boolean) => void;
}

/** Raises the learned wait of `learning` to `quietMs`. */
export function learn(learning: BatchLearning | undefined, quietMs: number, split: boolean): void {
  if (!learning || quietMs <= learning.quietMs) return;
  learning.quietMs = quietMs;
  learning.onLearned?.(quietMs, split);
}

/**
 * Whether the upstream session received no message during {@link QUIET_TURNS} event-loop turns
 * and for `batchQuietMs` (or the silence learned of the upstream, whichever is longer) after its
 * last message: whatever the server sent together with its last request has been read by then.
 * `lastInputAt` reads the time the call's last input request arrived (epoch ms): a new one means
 * the batch goes on.
 */
export async function upstreamQuiet(
  session: { readonly received: number; readonly lastReceivedAt: number },
  batchQuietMs: number,
  learning: BatchLearning | undefined,
  lastInputAt: () => number,
): Promise<boolean> {
  const seen = session.received;
  const inputs = lastInputAt();
  const same = () => session.received === seen && inputs === lastInputAt();
  for (let i = 0; i < QUIET_TURNS; i++) await new Promise((r) => setImmediate(r));
  if (!same()) return false;
  // A server preempted between two writes of one batch is given time to go on.
  const quietMs = Math.max(batchQuietMs, learning?.quietMs ?? 0);
  const left = quietMs - (performance.now() - session.lastReceivedAt);
  if (left > 0) await new Promise((r) => setTimeout(r, left));
  return same();
}
