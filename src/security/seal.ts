/**
 * Sealed `requestState` (docs/architecture.md, "Decisions and why" 3; MCP 2026-07-28
 * basic/patterns/mrtr §Server rules 3-4).
 *
 * A state is a JWT in JWE compact form (RFC 7516 §3.1, §7.1; `alg: dir`, `enc: A256GCM`, `kid` in
 * the protected header; claims `jti`, `iat`, `exp`), encrypted with Node's AES-256-GCM (OpenSSL),
 * in the process and at once: a state is sealed and opened on every input round, and Web Crypto
 * (jose's engine) makes each operation a trip to the thread pool. jose reads and writes the same
 * tokens, which the tests check both ways. Keys are derived from configured secrets with HKDF-SHA256; the first key seals,
 * every key opens, so keys rotate. Claims bind the state to upstream, principal, method, name,
 * a digest of the canonical arguments, the parked Exchange, the replica, the round and the
 * outstanding input keys; `exp` bounds it and `jti` makes it single-use (enforced by the caller).
 */
import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createHmac,
  createSecretKey,
  hkdfSync,
  randomBytes,
  randomUUID,
  timingSafeEqual,
  type KeyObject,
} from 'node:crypto';
import { canonicalJson } from '../protocol/canonical.js';
import { invalidParams } from '../protocol/errors.js';

/** What a sealed requestState asserts. */
export interface StateClaims {
  /** Upstream name. */
  up: string;
  /** Principal the call belongs to. */
  sub: string;
  /** Method: tools/call, prompts/get or resources/read. */
  m: string;
  /** Tool or prompt name, or resource URI. */
  n: string;
  /** base64url SHA-256 of the canonical (RFC 8785) arguments. */
  d: string;
  /** Exchange id. */
  ex: string;
  /** Replica (process) that parks the Exchange. */
  rep: string;
  /** Round number, from 1. */
  rnd: number;
  /** Input keys outstanding when the state was issued. */
  keys: string[];
  /** Single-use id. */
  jti: string;
  /** Expiry, ms since the epoch. */
  expMs: number;
  /** When it was sealed, seconds since the epoch (RFC 7519 `iat`), set by {@link StateSealer.seal}. */
  iat?: number;
  /** Pass-through to a 2026-07-28 upstream: the upstream's own `requestState`, when it gave one. */
  us?: string;
  /** Pass-through: answers the gateway adds to the retry (declines of forms the secret guard held back). */
  pre?: Record<string, Record<string, unknown>>;
  /** Set on pass-through states, which never open a parked Exchange (and bridge states never pass through). */
  pt?: true;
  /**
   * Set on the states of the gateway's own consent rounds (src/router/consent.ts: the user must
   * authorize the upstream first), which open neither a parked Exchange nor an upstream's state.
   */
  cs?: true;
  /**
   * Set on the states of the gateway's own approval rounds (src/router/approvals.ts: the user must
   * approve the call first), which open neither a parked Exchange nor an upstream's state.
   */
  ap?: true;
  /**
   * Replay mode: every question of the call so far, in order, with its answer once given; the
   * questions without an answer are those of `keys`. No Exchange is parked (`ex` and `rep` are empty).
   */
  rp?: ReplayEntry[];
}

/**
 * One question of a call in replay mode: the digest of the input request (method and params),
 * its input key, its method, whether it is sampling with tools (`t`), and the answer once given (`v`).
 */
export interface ReplayEntry {
  d: string;
  k: string;
  m: string;
  t?: 1;
  v?: Record<string, unknown>;
}

/** A configured key: `kid` plus a secret of at least 32 characters. */
export interface StateKey {
  kid: string;
  secret: string;
}

/** base64url SHA-256 of the RFC 8785 canonical JSON of `value` (undefined counts as `{}`). */
export function digestOf(value: unknown): string {
  return createHash('sha256')
    .update(canonicalJson(value ?? {}))
    .digest('base64url');
}

function deriveKey(secret: string, info = 'requestState A256GCM'): Uint8Array {
  return new Uint8Array(hkdfSync('sha256', Buffer.from(secret, 'utf8'), Buffer.from('mrtr-gateway'), Buffer.from(info), 32));
}

/**
 * Task ids of tasks a 2026-07-28 upstream created, as the gateway shows them to the client:
 * `p1.<base64url upstream taskId>.<base64url HMAC-SHA256(upstream, principal, taskId)>`. The id is
 * bound to the principal and the upstream (another caller's use of it is "not found"), stable for
 * one task (clients compare ids), and needs no store.
 */
export class TaskIdBinder {
  private readonly key: Buffer;

  /** @param key the first configured requestState key (a separate HMAC key is derived from it). */
  constructor(key: StateKey) {
    this.key = Buffer.from(deriveKey(key.secret, 'pass-through taskId HMAC-SHA256'));
  }

  private mac(upstream: string, principal: string, taskId: string): string {
    return createHmac('sha256', this.key).update(`${upstream}\u0000${principal}\u0000${taskId}`).digest('base64url');
  }

  /** The client-facing id of the upstream's `taskId`. */
  wrap(upstream: string, principal: string, taskId: string): string {
    return `p1.${Buffer.from(taskId, 'utf8').toString('base64url')}.${this.mac(upstream, principal, taskId)}`;
  }

  /** The upstream's taskId behind a client-facing id, or undefined when the id is not one this caller may use. */
  unwrap(upstream: string, principal: string, id: string): string | undefined {
    const m = /^p1\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]{43})$/.exec(id);
    if (!m) return undefined;
    const taskId = Buffer.from(m[1]!, 'base64url').toString('utf8');
    const want = Buffer.from(this.mac(upstream, principal, taskId));
    const got = Buffer.from(m[2]!);
    return want.length === got.length && timingSafeEqual(want, got) ? taskId : undefined;
  }
}

/** A key made at start when none is configured; states sealed with it die with the process. */
export function generatedKey(): StateKey {
  return { kid: `gen-${randomUUID().slice(0, 8)}`, secret: randomBytes(32).toString('base64url') };
}

/**
 * True when `token` is a JWE in its one canonical compact form: five segments of unpadded
 * base64url (RFC 7516 §7.1, RFC 7515 Appendix C), each exactly what its bytes encode to, so no
 * whitespace, padding or altered unused bits in a last character pass. A state is accepted only
 * as it was issued.
 */
export function isCanonicalCompactJwe(token: string): boolean {
  const parts = token.split('.');
  if (parts.length !== 5) return false;
  return parts.every((p) => /^[A-Za-z0-9_-]*$/.test(p) && Buffer.from(p, 'base64url').toString('base64url') === p);
}

/**
 * Longest requestState accepted, in characters. A pass-through state carries the upstream's own
 * state inside it, so the bound leaves room for that.
 */
export const MAX_STATE_CHARS = 65_536;

/** The message every rejected state gets, so callers learn nothing about why. */
export const INVALID_STATE = 'Invalid or expired requestState; start the request again without requestState';

/** JWE protected header fields a state may carry (RFC 7516 §4.1): exactly these, no `zip` or `crit`. */
const HEADER_FIELDS = ['alg', 'enc', 'kid'];
/** AES-GCM initialization vector and authentication tag lengths of A256GCM, in bytes (RFC 7518 §5.3). */
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** One key: the AES-256 key and the base64url protected header that names it (the AAD of every state it seals). */
interface SealKey {
  key: KeyObject;
  header: string;
}

/**
 * Seals and opens requestState values (MCP 2026-07-28 basic/patterns/mrtr §Server rules 3-4: the
 * state is opaque to the client and integrity-protected by the server).
 */
export class StateSealer {
  /** The derived keys by kid. */
  private readonly keys: Map<string, SealKey>;
  private readonly sealKey: SealKey;

  /** @param keys at least one; the first seals. */
  constructor(keys: StateKey[]) {
    if (keys.length === 0) throw new Error('StateSealer needs at least one key');
    this.keys = new Map(
      keys.map((k) => [
        k.kid,
        {
          key: createSecretKey(deriveKey(k.secret)),
          header: Buffer.from(JSON.stringify({ alg: 'dir', enc: 'A256GCM', kid: k.kid })).toString('base64url'),
        },
      ]),
    );
    this.sealKey = this.keys.get(keys[0]!.kid)!;
  }

  /**
   * Seals `claims` into an opaque string: the claims with `jti`, `iat` and `exp` (seconds, RFC 7519
   * §4.1), encrypted and authenticated with a fresh 96-bit IV, the protected header as AAD.
   */
  async seal(claims: StateClaims): Promise<string> {
    const { jti, expMs, ...rest } = claims;
    const payload = JSON.stringify({ ...rest, expMs, jti, iat: Math.floor(Date.now() / 1000), exp: Math.ceil(expMs / 1000) });
    const { key, header } = this.sealKey;
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
    cipher.setAAD(Buffer.from(header, 'ascii'));
    const ciphertext = Buffer.concat([cipher.update(payload, 'utf8'), cipher.final()]);
    return `${header}..${iv.toString('base64url')}.${ciphertext.toString('base64url')}.${cipher.getAuthTag().toString('base64url')}`;
  }

  /**
   * Opens a state: checks its form and header, decrypts and authenticates it, and checks expiry.
   * @throws GatewayError -32602 (HTTP 200) with {@link INVALID_STATE} for anything not genuine and current.
   */
  async open(token: unknown, now = Date.now()): Promise<StateClaims> {
    if (typeof token !== 'string' || token.length === 0 || token.length > MAX_STATE_CHARS || !isCanonicalCompactJwe(token))
      throw invalidParams(INVALID_STATE);
    const [headerPart, encryptedKey, ivPart, ciphertextPart, tagPart] = token.split('.') as [string, string, string, string, string];
    let payload: Record<string, unknown>;
    try {
      const header: unknown = JSON.parse(Buffer.from(headerPart, 'base64url').toString('utf8'));
      if (
        !isPlainObject(header) ||
        Object.keys(header).some((f) => !HEADER_FIELDS.includes(f)) ||
        header.alg !== 'dir' ||
        header.enc !== 'A256GCM' ||
        typeof header.kid !== 'string'
      )
        throw new Error('header');
      const sealKey = this.keys.get(header.kid);
      const iv = Buffer.from(ivPart, 'base64url');
      const tag = Buffer.from(tagPart, 'base64url');
      // `dir`: no encrypted key (RFC 7518 §4.5).
      if (!sealKey || encryptedKey !== '' || iv.length !== IV_BYTES || tag.length !== TAG_BYTES) throw new Error('key');
      const decipher = createDecipheriv('aes-256-gcm', sealKey.key, iv, { authTagLength: TAG_BYTES });
      decipher.setAAD(Buffer.from(headerPart, 'ascii'));
      decipher.setAuthTag(tag);
      const plaintext = Buffer.concat([decipher.update(Buffer.from(ciphertextPart, 'base64url')), decipher.final()]);
      const parsed: unknown = JSON.parse(plaintext.toString('utf8'));
      if (!isPlainObject(parsed)) throw new Error('payload');
      payload = parsed;
    } catch {
      throw invalidParams(INVALID_STATE);
    }
    const c = payload as unknown as StateClaims;
    if (typeof c.jti !== 'string' || typeof c.expMs !== 'number' || c.expMs <= now) throw invalidParams(INVALID_STATE);
    return c;
  }
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
