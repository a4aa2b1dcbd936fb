/**
 * Request and call ids: UUID-shaped (8-4-4-4-12 hex, RFC 9562 version 4 and variant bits), unique
 * within the process: a random prefix drawn once, then a counter that starts at a random value.
 * They name requests in logs and calls upstream (the `progressToken`); none of them is a secret, so
 * drawing 122 fresh random bits for each, as `crypto.randomUUID` does, is not needed on the path of
 * every call.
 */
import { randomBytes, randomUUID } from 'node:crypto';

const PREFIX = randomUUID().slice(0, 24);
let next = randomBytes(6).readUIntBE(0, 6);

/** A new id, unique within this process (`xxxxxxxx-xxxx-4xxx-Vxxx-NNNNNNNNNNNN`, the last group a counter). */
export function uniqueId(): string {
  next = next >= 0xffff_ffff_ffff ? 0 : next + 1;
  return PREFIX + next.toString(16).padStart(12, '0');
}
