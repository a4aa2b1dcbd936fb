/**
 * Pure unit tests of the `x-mcp-header` annotation rules and the `Mcp-Param-*` header checks
 * (src/protocol/param-headers.ts).
 */
import { describe, expect, it } from 'vitest';
import { checkParamHeaders, headerParams, type ParamHeader } from '../../src/protocol/param-headers.js';
import { GatewayError } from '../../src/protocol/errors.js';

const obj = (properties: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({ type: 'object', properties, ...extra });
const b64 = (s: string) => `=?base64?${Buffer.from(s, 'utf8').toString('base64')}?=`;

function params(schema: unknown): ParamHeader[] {
  const r = headerParams(schema);
  if ('invalid' in r) throw new Error(`unexpectedly invalid: ${r.invalid}`);
  return r.params;
}

function invalid(schema: unknown): string {
  const r = headerParams(schema);
  if (!('invalid' in r)) throw new Error(`unexpectedly valid: ${JSON.stringify(r.params)}`);
  return r.invalid;
}

function rejects(fn: () => void): GatewayError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(GatewayError);
    expect((e as GatewayError).code).toBe(-32020);
    expect((e as GatewayError).httpStatus).toBe(400);
    return e as GatewayError;
  }
  throw new Error('expected -32020, nothing was thrown');
}

describe('headerParams (x-mcp-header annotations)', () => {
  it('finds annotated string, integer and boolean properties, nested through properties', () => {
    const schema = obj({
      region: { type: 'string', 'x-mcp-header': 'Region' },
      n: { type: 'integer', 'x-mcp-header': 'N' },
      flag: { type: 'boolean', 'x-mcp-header': 'Flag' },
      target: obj({ host: { type: 'string', 'x-mcp-header': 'Target-Host' } }),
      plain: { type: 'string' },
    });
    expect(params(schema)).toEqual([
      { name: 'Region', path: ['region'], type: 'string' },
      { name: 'N', path: ['n'], type: 'integer' },
      { name: 'Flag', path: ['flag'], type: 'boolean' },
      { name: 'Target-Host', path: ['target', 'host'], type: 'string' },
    ]);
  });

  it('accepts nullable primitives (["string","null"], or anyOf with null)', () => {
    expect(params(obj({ a: { type: ['string', 'null'], 'x-mcp-header': 'A' } }))[0]!.type).toBe('string');
    expect(params(obj({ a: { anyOf: [{ type: 'integer' }, { type: 'null' }], 'x-mcp-header': 'A' } }))[0]!.type).toBe('integer');
  });

  it('a schema without annotations, or without properties, has none', () => {
    expect(params({ type: 'object' })).toEqual([]);
    expect(params(undefined)).toEqual([]);
    expect(
      params(obj({ a: { type: 'string' } }, { $defs: { x: { type: 'object', properties: { 'x-mcp-header': { type: 'string' } } } } })),
    ).toEqual([]);
  });

  it('does not mistake data for annotations (default, enum, const, examples)', () => {
    expect(params(obj({ a: { type: 'object', default: { 'x-mcp-header': 'X' }, examples: [{ 'x-mcp-header': 'Y' }] } }))).toEqual([]);
  });

  it('refuses number, object, array and untyped properties', () => {
    expect(invalid(obj({ r: { type: 'number', 'x-mcp-header': 'R' } }))).toContain('"number"');
    expect(invalid(obj({ r: { type: 'object', 'x-mcp-header': 'R' } }))).toContain('R');
    expect(invalid(obj({ r: { type: 'array', items: { type: 'string' }, 'x-mcp-header': 'R' } }))).toContain('R');
    expect(invalid(obj({ r: { 'x-mcp-header': 'R' } }))).toContain('R');
    expect(invalid(obj({ r: { type: ['string', 'integer'], 'x-mcp-header': 'R' } }))).toContain('R');
  });

  it('refuses names that are empty, not tokens, or not strings', () => {
    for (const name of ['', 'Two Words', 'a:b', 'line\nbreak', 'é', 42]) {
      expect(invalid(obj({ a: { type: 'string', 'x-mcp-header': name } }))).toContain('token');
    }
  });

  it('refuses names repeated case-insensitively', () => {
    expect(invalid(obj({ a: { type: 'string', 'x-mcp-header': 'Region' }, b: { type: 'string', 'x-mcp-header': 'REGION' } }))).toContain(
      'repeats',
    );
  });

  it('refuses annotations not reachable through properties alone', () => {
    const s = { type: 'string', 'x-mcp-header': 'X' };
    for (const schema of [
      { ...s },
      obj({ list: { type: 'array', items: s } }),
      obj({ list: { type: 'array', prefixItems: [s] } }),
      obj({}, { anyOf: [obj({ a: s })] }),
      obj({}, { allOf: [obj({ a: s })] }),
      obj({}, { oneOf: [obj({ a: s })] }),
      obj({}, { not: obj({ a: s }) }),
      obj({}, { if: obj({ a: s }), then: {}, else: {} }),
      obj({ a: { $ref: '#/$defs/a' } }, { $defs: { a: s } }),
      obj({}, { additionalProperties: s }),
      obj({}, { patternProperties: { '^x': s } }),
    ]) {
      expect(invalid(schema), JSON.stringify(schema)).toContain('reachable');
    }
  });
});

describe('checkParamHeaders (Mcp-Param-* against the body)', () => {
  const ps = params(
    obj({
      region: { type: 'string', 'x-mcp-header': 'Region' },
      n: { type: 'integer', 'x-mcp-header': 'N' },
      flag: { type: 'boolean', 'x-mcp-header': 'Flag' },
      target: obj({ host: { type: 'string', 'x-mcp-header': 'Target-Host' } }),
      note: { type: ['string', 'null'], 'x-mcp-header': 'Note' },
    }),
  );

  it('accepts matching headers, plain or Base64, integers compared numerically', () => {
    checkParamHeaders(
      ps,
      { region: 'us-west1', n: 42, flag: true, target: { host: 'db.local' } },
      { region: 'us-west1', n: '42', flag: 'true', 'target-host': 'db.local' },
    );
    checkParamHeaders(ps, { region: 'Hello, 世界', n: 42 }, { region: b64('Hello, 世界'), n: '42.0' });
    checkParamHeaders(ps, { region: ' padded ', n: -7 }, { region: b64(' padded '), n: '-7' });
    checkParamHeaders(ps, { region: '=?base64?literal?=' }, { region: b64('=?base64?literal?=') });
    checkParamHeaders(ps, { region: 'SGVsbG8=' }, { region: 'SGVsbG8=' });
    checkParamHeaders(ps, { region: '=?base64?SGVsbG8=' }, { region: '=?base64?SGVsbG8=' });
  });

  it('expects no header for absent or null values, and ignores headers no annotation names', () => {
    checkParamHeaders(ps, {}, {});
    checkParamHeaders(ps, undefined, { other: 'x' });
    checkParamHeaders(ps, { note: null, target: {} }, {});
  });

  it('a value present in the body without its header → -32020', () => {
    expect(rejects(() => checkParamHeaders(ps, { region: 'eu' }, {})).message).toContain('Mcp-Param-Region');
    expect(rejects(() => checkParamHeaders(ps, { region: 'eu', target: { host: 'h' } }, { region: 'eu' })).message).toContain(
      'Mcp-Param-Target-Host',
    );
  });

  it('a header whose argument is absent or null → -32020', () => {
    rejects(() => checkParamHeaders(ps, { region: 'eu' }, { region: 'eu', note: 'x' }));
    rejects(() => checkParamHeaders(ps, { region: 'eu', note: null }, { region: 'eu', note: 'x' }));
  });

  it('mismatched values → -32020 (values are case-sensitive; booleans are lower-case)', () => {
    expect(rejects(() => checkParamHeaders(ps, { region: 'eu' }, { region: 'us' })).message).toContain("'us'");
    rejects(() => checkParamHeaders(ps, { region: 'eu' }, { region: 'EU' }));
    rejects(() => checkParamHeaders(ps, { n: 42 }, { n: '43' }));
    rejects(() => checkParamHeaders(ps, { n: 42 }, { n: '42abc' }));
    rejects(() => checkParamHeaders(ps, { n: 42 }, { n: '' }));
    rejects(() => checkParamHeaders(ps, { flag: true }, { flag: 'True' }));
    rejects(() => checkParamHeaders(ps, { region: ['eu'] }, { region: 'eu' }));
  });

  it('bad characters or bad Base64 → -32020', () => {
    rejects(() => checkParamHeaders(ps, { region: 'café' }, { region: 'caf\u00e9' }));
    rejects(() => checkParamHeaders(ps, { region: 'Hello' }, { region: '=?base64?SGVsbG8?=' }));
    rejects(() => checkParamHeaders(ps, { region: 'Hello' }, { region: '=?base64?SGVs!!!bG8=?=' }));
  });
});
