/**
 * Authenticated encryption of what the per-user upstream credentials keep or hand out
 * (docs/security.md, "Upstream credentials"): the tokens of a stored grant, a registered OAuth
 * client's secret, the consent link and the OAuth `state`. AES-256-GCM (Node's OpenSSL) with keys
 * derived by HKDF-SHA256 from the configured secrets (`credentials.keys`, else the `requestState`
 * keys), the first key encrypting and every key decrypting, so keys rotate like the requestState
 * keys. Each value is bound to a context string (its purpose and, for a grant, its upstream and
 * principal) given as additional authenticated data: a sealed value moved to another record or
 * used for another purpose does not open.
 *
 * Form: `<kid>.<iv>.<ciphertext>.<tag>`, each part base64url (the kid too).
 */
import { createCipheriv, createDecipheriv, createSecretKey, hkdfSync, randomBytes, type KeyObject } from 'node:crypto';
import type { StateKey } from './seal.js';

const IV_BYTES = 12;
const TAG_BYTES = 16;

/** Seals and opens JSON values with the credentials keys. */
export class SealedBox {
  private readonly keys: Map<string, KeyObject>;
  private readonly first: { kid: string; key: KeyObject };

  /** @param keys at least one `{kid, secret}`; the first encrypts, every one decrypts. */
  constructor(keys: readonly StateKey[]) {
    if (keys.length === 0) throw new Error('SealedBox needs at least one key');
    this.keys = new Map(
      keys.map((k) => [
        Buffer.from(k.kid, 'utf8').toString('base64url'),
        createSecretKey(
          new Uint8Array(
            hkdfSync('sha256', Buffer.from(k.secret, 'utf8'), Buffer.from('mrtr-gateway'), Buffer.from('credentials A256GCM'), 32),
          ),
        ),
      ]),
    );
    const kid = Buffer.from(keys[0]!.kid, 'utf8').toString('base64url');
    this.first = { kid, key: this.keys.get(kid)! };
  }

  /**
   * `value` (JSON) encrypted and authenticated with the first key, bound to `context` (for example
   * `grant\nUPSTREAM\nPRINCIPAL`): only {@link open} with the same context opens it.
   */
  seal(value: unknown, context: string): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.first.key, iv, { authTagLength: TAG_BYTES });
    cipher.setAAD(Buffer.from(`${this.first.kid}\n${context}`, 'utf8'));
    const ciphertext = Buffer.concat([cipher.update(JSON.stringify(value), 'utf8'), cipher.final()]);
    return [this.first.kid, iv.toString('base64url'), ciphertext.toString('base64url'), cipher.getAuthTag().toString('base64url')].join(
      '.',
    );
  }

  /**
   * The value sealed in `sealed` for `context`, or undefined when it is not genuine: altered,
   * sealed with a key no longer configured, for another context, or not a sealed value at all.
   */
  open<T = unknown>(sealed: unknown, context: string): T | undefined {
    if (typeof sealed !== 'string' || sealed.length > 65_536) return undefined;
    const parts = sealed.split('.');
    if (parts.length !== 4 || !parts.every((p) => /^[A-Za-z0-9_-]*$/.test(p))) return undefined;
    const [kid, ivPart, ciphertextPart, tagPart] = parts as [string, string, string, string];
    const key = this.keys.get(kid);
    const iv = Buffer.from(ivPart, 'base64url');
    const tag = Buffer.from(tagPart, 'base64url');
    if (!key || iv.length !== IV_BYTES || tag.length !== TAG_BYTES) return undefined;
    try {
      const decipher = createDecipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
      decipher.setAAD(Buffer.from(`${kid}\n${context}`, 'utf8'));
      decipher.setAuthTag(tag);
      const plaintext = Buffer.concat([decipher.update(Buffer.from(ciphertextPart, 'base64url')), decipher.final()]);
      return JSON.parse(plaintext.toString('utf8')) as T;
    } catch {
      return undefined;
    }
  }
}
