import { createCipheriv, hkdfSync, randomBytes } from 'node:crypto';
import { CompactEncrypt, EncryptJWT, jwtDecrypt } from 'jose';
import { describe, expect, it } from 'vitest';
import { INVALID_STATE, StateSealer, type StateClaims } from '../../src/security/seal.js';

const SECRET = 'a-state-secret-of-at-least-32-characters';
const KEY = new Uint8Array(hkdfSync('sha256', Buffer.from(SECRET), Buffer.from('mrtr-gateway'), Buffer.from('requestState A256GCM'), 32));

function claims(over: Partial<StateClaims> = {}): StateClaims {
  return {
    up: 'u',
    sub: 'alice',
    m: 'tools/call',
    n: 'ask',
    d: 'digest',
    ex: 'x1',
    rep: 'r1',
    rnd: 1,
    keys: ['elicitation-1'],
    jti: 'j-1',
    expMs: Date.now() + 60_000,
    ...over,
  };
}

/** A compact JWE with any protected header, encrypted with A256GCM under `key` (for headers jose refuses to write). */
function handMade(header: Record<string, unknown>, payload: Uint8Array, key: Uint8Array = KEY): string {
  const h = Buffer.from(JSON.stringify(header)).toString('base64url');
  const iv = randomBytes(12);
  const c = createCipheriv('aes-256-gcm', key, iv);
  c.setAAD(Buffer.from(h));
  const ct = Buffer.concat([c.update(payload), c.final()]);
  return [h, '', iv.toString('base64url'), ct.toString('base64url'), c.getAuthTag().toString('base64url')].join('.');
}

async function rejected(sealer: StateSealer, token: string): Promise<void> {
  await expect(sealer.open(token)).rejects.toMatchObject({ code: -32602, message: INVALID_STATE });
}

describe('requestState sealing', () => {
  const sealer = new StateSealer([{ kid: 'k1', secret: SECRET }]);

  it('seals a JWT in JWE compact form that jose decrypts with the derived key, with jti, iat and exp', async () => {
    const c = claims();
    const token = await sealer.seal(c);
    const { payload, protectedHeader } = await jwtDecrypt(token, KEY, {
      keyManagementAlgorithms: ['dir'],
      contentEncryptionAlgorithms: ['A256GCM'],
    });
    expect(protectedHeader).toEqual({ alg: 'dir', enc: 'A256GCM', kid: 'k1' });
    expect(payload).toMatchObject({
      up: 'u',
      sub: 'alice',
      n: 'ask',
      keys: ['elicitation-1'],
      jti: 'j-1',
      expMs: c.expMs,
      exp: Math.ceil(c.expMs / 1000),
    });
    expect(typeof payload.iat).toBe('number');
    expect(await sealer.open(token)).toMatchObject({ ...c });
  });

  it('opens a state that jose sealed the same way (a replica of another version), and no two seals are alike', async () => {
    const c = claims({ jti: 'from-jose' });
    const { jti, expMs, ...rest } = c;
    const token = await new EncryptJWT({ ...rest, expMs })
      .setProtectedHeader({ alg: 'dir', enc: 'A256GCM', kid: 'k1' })
      .setJti(jti)
      .setIssuedAt()
      .setExpirationTime(Math.ceil(expMs / 1000))
      .encrypt(KEY);
    expect(await sealer.open(token)).toMatchObject(c);
    expect(await sealer.seal(c)).not.toBe(await sealer.seal(c));
  });

  it('opens states of every configured key and seals with the first', async () => {
    const old = new StateSealer([{ kid: 'k1', secret: SECRET }]);
    const rotated = new StateSealer([
      { kid: 'k2', secret: 'another-secret-of-at-least-32-characters' },
      { kid: 'k1', secret: SECRET },
    ]);
    expect(await rotated.open(await old.seal(claims()))).toMatchObject({ jti: 'j-1' });
    await rejected(old, await rotated.seal(claims()));
  });

  it('rejects expired states, other keys, altered bytes and headers it never issues', async () => {
    await rejected(sealer, await sealer.seal(claims({ expMs: Date.now() - 1 })));
    await rejected(new StateSealer([{ kid: 'k1', secret: 'not-the-same-secret-at-least-32-chars!' }]), await sealer.seal(claims()));
    const parts = (await sealer.seal(claims())).split('.');
    for (const i of [0, 2, 3, 4]) {
      const p = [...parts];
      const b = Buffer.from(p[i]!, 'base64url');
      b[0] = b[0]! ^ 1;
      p[i] = b.toString('base64url');
      await rejected(sealer, p.join('.'));
    }
    const payload = new TextEncoder().encode(JSON.stringify({ ...claims(), exp: Math.ceil(claims().expMs / 1000) }));
    for (const header of [
      { alg: 'dir', enc: 'A128GCM', kid: 'k1' },
      { alg: 'dir', enc: 'A256GCM', kid: 'k1', zip: 'DEF' },
      { alg: 'dir', enc: 'A256GCM', kid: 'unknown' },
      { alg: 'dir', enc: 'A256GCM' },
    ]) {
      const key = header.enc === 'A128GCM' ? KEY.slice(0, 16) : KEY;
      await rejected(sealer, await new CompactEncrypt(payload).setProtectedHeader(header as never).encrypt(key));
    }
    // Headers jose does not write: a critical extension, and a typ beside the three fields.
    await rejected(sealer, handMade({ alg: 'dir', enc: 'A256GCM', kid: 'k1', crit: ['x'], x: 1 }, payload));
    await rejected(sealer, handMade({ alg: 'dir', enc: 'A256GCM', kid: 'k1', typ: 'JWT' }, payload));
    // The same hand-made token with the header it issues opens: the rejections above are the header's.
    expect(await sealer.open(handMade({ alg: 'dir', enc: 'A256GCM', kid: 'k1' }, payload))).toMatchObject({ jti: 'j-1' });
    const arrayPayload = await new CompactEncrypt(new TextEncoder().encode('[1]'))
      .setProtectedHeader({ alg: 'dir', enc: 'A256GCM', kid: 'k1' })
      .encrypt(KEY);
    await rejected(sealer, arrayPayload);
    for (const junk of ['', 'a.b.c.d.e', '....', `${parts[0]}.x.${parts[2]}.${parts[3]}.${parts[4]}`, 42, null])
      await rejected(sealer, junk as string);
  });
});
