/**
 * Request and call ids: UUID-shaped (8-4-4-4-12 hex, RFC 9562 version 4 and variant bits), unique
 * within the process: a random prefix, then a counter that starts at a random value (a new prefix
 * is drawn when the counter wraps). They name requests in logs and calls upstream (the
 * `progressToken`); none of them is a secret, so drawing 122 fresh random bits for each, as
 * `crypto.randomUUID` does, is not needed on the path of every call.
 */
import { randomBytes, randomUUID } from 'node:crypto';

/** The counter stays below 2^30, a small integer for V8 (its hex form needs no floating-point work). */
const COUNTER_LIMIT = 0x4000_0000;

let prefix = randomUUID().slice(0, 28);
let next = randomBytes(4).readUInt32BE(0) % COUNTER_LIMIT;

/** A new id, unique within this process (`xxxxxxxx-xxxx-4xxx-Vxxx-xxxxNNNNNNNN`, the last 8 digits a counter). */
export function uniqueId(): string {
  if (++next >= COUNTER_LIMIT) {
    prefix = randomUUID().slice(0, 28);
    next = 0;
  }
  return prefix + next.toString(16).padStart(8, '0');
}
