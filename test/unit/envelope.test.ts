/**
 * Pure unit tests of the 2026-07-28 request checks in src/protocol/envelope.ts.
 */
import { describe, expect, it } from 'vitest';
import { decodeHeaderValue, parseJsonRpc, validateRequest } from '../../src/protocol/envelope.js';
import { GatewayError, quoted } from '../../src/protocol/errors.js';

const V = '2026-07-28';
const PV = 'io.modelcontextprotocol/protocolVersion';
const CC = 'io.modelcontextprotocol/clientCapabilities';

const meta = (extra: Record<string, unknown> = {}) => ({ [PV]: V, [CC]: {}, ...extra });

/** Headers as Fetch `Headers` (case-insensitive names). */
function headers(h: Record<string, string>): Headers {
  return new Headers(h);
}

function okHeaders(method: string, name?: string): Headers {
  return headers({ 'mcp-protocol-version': V, 'mcp-method': method, ...(name !== undefined ? { 'mcp-name': name } : {}) });
}

type Req = Parameters<typeof validateRequest>[0];

function req(method: string, params?: Record<string, unknown>, id: string | number = 1): Req {
  return { jsonrpc: '2.0', id, method, ...(params ? { params } : {}) };
}

/** Runs `fn` and returns the GatewayError it throws (fails if it does not throw one). */
function caught(fn: () => unknown): GatewayError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(GatewayError);
    return e as GatewayError;
  }
  throw new Error('expected a GatewayError, nothing was thrown');
}

describe('parseJsonRpc', () => {
  it('accepts a request and returns its fields', () => {
    const r = parseJsonRpc({ jsonrpc: '2.0', id: 'a', method: 'tools/list', params: { _meta: meta() } });
    expect(r).toEqual({ jsonrpc: '2.0', id: 'a', method: 'tools/list', params: { _meta: meta() } });
  });

  it('accepts a notification (no id) and leaves id undefined', () => {
    const r = parseJsonRpc({ jsonrpc: '2.0', method: 'notifications/cancelled' });
    expect(r.id).toBeUndefined();
  });

  it('rejects a batch (array) with -32600 / HTTP 400', () => {
    const e = caught(() => parseJsonRpc([{ jsonrpc: '2.0', id: 1, method: 'tools/list' }]));
    expect(e.code).toBe(-32600);
    expect(e.httpStatus).toBe(400);
    expect(e.message).toMatch(/batch/i);
  });

  it('rejects a missing or wrong "jsonrpc" with -32600 / HTTP 400 naming the field', () => {
    for (const body of [
      { id: 1, method: 'tools/list' },
      { jsonrpc: '1.0', id: 1, method: 'tools/list' },
    ]) {
      const e = caught(() => parseJsonRpc(body));
      expect(e.code).toBe(-32600);
      expect(e.httpStatus).toBe(400);
      expect(e.message).toContain('jsonrpc');
    }
  });

  it('rejects a missing method, a null id, a fractional id and non-object params with -32600', () => {
    for (const body of [
      { jsonrpc: '2.0', id: 1 },
      { jsonrpc: '2.0', id: null, method: 'tools/list' },
      { jsonrpc: '2.0', id: 1.5, method: 'tools/list' },
      { jsonrpc: '2.0', id: 1, method: 'tools/list', params: [1, 2] },
      'tools/list',
      null,
    ]) {
      expect(caught(() => parseJsonRpc(body)).code, JSON.stringify(body)).toBe(-32600);
    }
    for (const id of [null, 1.5]) {
      expect(caught(() => parseJsonRpc({ jsonrpc: '2.0', id, method: 'tools/list' })).message).toBe(
        'Invalid JSON-RPC request: id: must be a string or an integer (an MCP request id is never null)',
      );
    }
  });
});

describe('decodeHeaderValue', () => {
  it('returns a plain value unchanged', () => {
    expect(decodeHeaderValue('get-weather')).toBe('get-weather');
  });

  it('trims surrounding whitespace', () => {
    expect(decodeHeaderValue('  echo \t')).toBe('echo');
  });

  it('decodes =?base64?…?= as UTF-8', () => {
    const name = 'café ☕ résumé';
    expect(decodeHeaderValue(`=?base64?${Buffer.from(name, 'utf8').toString('base64')}?=`)).toBe(name);
    expect(decodeHeaderValue(' =?base64?ZWNobw==?= ')).toBe('echo');
  });

  it('leaves values without both sentinel ends alone', () => {
    expect(decodeHeaderValue('=?base64?ZWNobw==')).toBe('=?base64?ZWNobw==');
    expect(decodeHeaderValue('ZWNobw==?=')).toBe('ZWNobw==?=');
    expect(decodeHeaderValue('=?BASE64?ZWNobw==?=')).toBe('=?BASE64?ZWNobw==?=');
  });

  it('refuses a sentinel around bad Base64 (characters, padding) or bytes that are not UTF-8 → -32020 / 400', () => {
    for (const bad of [
      '=?base64?not base64!?=',
      '=?base64?SGVs!!!bG8=?=',
      '=?base64?SGVsbG8?=',
      '=?base64?SGVsbG8===?=',
      `=?base64?${Buffer.from([0xff, 0xfe]).toString('base64')}?=`,
    ]) {
      const e = caught(() => decodeHeaderValue(bad, 'Mcp-Param-Region'));
      expect(e.code).toBe(-32020);
      expect(e.httpStatus).toBe(400);
      expect(e.message).toContain('Mcp-Param-Region');
    }
  });

  it('refuses characters a header value may not carry (non-ASCII, control characters) → -32020 / 400', () => {
    for (const bad of ['caf\u00e9', 'a\u0000b', 'line\u007f']) {
      const e = caught(() => decodeHeaderValue(bad));
      expect(e.code).toBe(-32020);
      expect(e.httpStatus).toBe(400);
    }
    expect(decodeHeaderValue('a\tb c')).toBe('a\tb c');
  });
});

describe('validateRequest', () => {
  it('returns the validated request: params without _meta, the version, capabilities and progressToken', () => {
    const v = validateRequest(
      req('tools/call', { name: 'echo', arguments: { message: 'hi' }, _meta: meta({ progressToken: 'p1' }) }, 'x'),
      okHeaders('tools/call', 'echo'),
    );
    expect(v.id).toBe('x');
    expect(v.method).toBe('tools/call');
    expect(v.params).toEqual({ name: 'echo', arguments: { message: 'hi' } });
    expect(v.protocolVersion).toBe(V);
    expect(v.clientCapabilities).toEqual({});
    expect(v.progressToken).toBe('p1');
    expect(v.meta[PV]).toBe(V);
  });

  it('removed and unknown methods → -32601 / 404', () => {
    for (const m of ['initialize', 'ping', 'logging/setLevel', 'resources/subscribe', 'no/such']) {
      const e = caught(() => validateRequest(req(m, { _meta: meta() }), okHeaders(m)));
      expect(e.code, m).toBe(-32601);
      expect(e.httpStatus, m).toBe(404);
      expect(e.message, m).toContain(m);
    }
  });

  it('check order: an unknown method is reported before a missing envelope and missing headers', () => {
    const e = caught(() => validateRequest(req('initialize'), headers({})));
    expect(e.code).toBe(-32601);
  });

  it('missing params, missing _meta, missing protocolVersion or clientCapabilities → -32602 / 400', () => {
    const cases: (Record<string, unknown> | undefined)[] = [
      undefined,
      {},
      { _meta: [] },
      { _meta: { [CC]: {} } },
      { _meta: { [PV]: '', [CC]: {} } },
      { _meta: { [PV]: V } },
      { _meta: { [PV]: V, [CC]: 'all' } },
    ];
    for (const params of cases) {
      const e = caught(() => validateRequest(req('tools/list', params), okHeaders('tools/list')));
      expect(e.code, JSON.stringify(params)).toBe(-32602);
      expect(e.httpStatus, JSON.stringify(params)).toBe(400);
    }
    // A version of the wrong type is named as such, not as missing.
    expect(caught(() => validateRequest(req('tools/list', { _meta: { [PV]: 2026, [CC]: {} } }), okHeaders('tools/list'))).message).toMatch(
      /protocolVersion"\] must be a non-empty string, got 2026/,
    );
    expect(caught(() => validateRequest(req('tools/list', { _meta: { [CC]: {} } }), okHeaders('tools/list'))).message).toMatch(
      /protocolVersion"\] is required/,
    );
  });

  it('check order: a malformed envelope is reported before an unsupported version', () => {
    const e = caught(() => validateRequest(req('tools/list', { _meta: { [PV]: '1900-01-01' } }), okHeaders('tools/list')));
    expect(e.code).toBe(-32602);
  });

  it('unsupported version → -32022 / 400 with data.supported and data.requested', () => {
    const e = caught(() =>
      validateRequest(
        req('tools/list', { _meta: meta({ [PV]: '1900-01-01' }) }),
        headers({ 'mcp-protocol-version': '1900-01-01', 'mcp-method': 'tools/list' }),
      ),
    );
    expect(e.code).toBe(-32022);
    expect(e.httpStatus).toBe(400);
    expect(e.data).toEqual({ supported: [V], requested: '1900-01-01' });
  });

  it('check order: a version header that differs from the envelope is reported (-32020) before an unsupported version', () => {
    const e = caught(() =>
      validateRequest(
        req('tools/list', { _meta: meta({ [PV]: 'v999.0.0' }) }),
        headers({ 'mcp-protocol-version': V, 'mcp-method': 'tools/list' }),
      ),
    );
    expect(e.code).toBe(-32020);
  });

  it('check order: an unsupported version (header matching) is reported before missing Mcp-Method', () => {
    const e = caught(() =>
      validateRequest(req('tools/list', { _meta: meta({ [PV]: '1900-01-01' }) }), headers({ 'mcp-protocol-version': '1900-01-01' })),
    );
    expect(e.code).toBe(-32022);
  });

  it('MCP-Protocol-Version missing or different from _meta → -32020 / 400', () => {
    for (const h of [{ 'mcp-method': 'tools/list' }, { 'mcp-method': 'tools/list', 'mcp-protocol-version': '2025-11-25' }] as Record<
      string,
      string
    >[]) {
      const e = caught(() => validateRequest(req('tools/list', { _meta: meta() }), headers(h)));
      expect(e.code).toBe(-32020);
      expect(e.httpStatus).toBe(400);
      expect(e.message).toContain('MCP-Protocol-Version');
    }
  });

  it('Mcp-Method missing, different, or different in case → -32020 / 400', () => {
    for (const h of [{}, { 'mcp-method': 'prompts/list' }, { 'mcp-method': 'Tools/List' }] as Record<string, string>[]) {
      const e = caught(() => validateRequest(req('tools/list', { _meta: meta() }), headers({ 'mcp-protocol-version': V, ...h })));
      expect(e.code, JSON.stringify(h)).toBe(-32020);
      expect(e.httpStatus).toBe(400);
      expect(e.message).toContain('Mcp-Method');
    }
  });

  it('header names are case-insensitive and values are trimmed', () => {
    const v = validateRequest(
      req('prompts/get', { name: 'simple-prompt', _meta: meta() }),
      headers({ 'MCP-PROTOCOL-VERSION': ` ${V} `, 'MCP-METHOD': ' prompts/get ', 'MCP-NAME': ' simple-prompt ' }),
    );
    expect(v.method).toBe('prompts/get');
  });

  it('Mcp-Name is required for tools/call, prompts/get and resources/read and must match name/uri → -32020 / 400', () => {
    const cases: [string, Record<string, unknown>][] = [
      ['tools/call', { name: 'echo' }],
      ['prompts/get', { name: 'simple-prompt' }],
      ['resources/read', { uri: 'demo://resource/static/document/a.md' }],
    ];
    for (const [m, p] of cases) {
      const missing = caught(() => validateRequest(req(m, { ...p, _meta: meta() }), okHeaders(m)));
      expect(missing.code, m).toBe(-32020);
      expect(missing.message, m).toContain('Mcp-Name');
      const wrong = caught(() => validateRequest(req(m, { ...p, _meta: meta() }), okHeaders(m, 'something-else')));
      expect(wrong.code, m).toBe(-32020);
      expect(wrong.httpStatus, m).toBe(400);
      expect(wrong.message, m).toContain('something-else');
      const ok = validateRequest(req(m, { ...p, _meta: meta() }), okHeaders(m, String(p.name ?? p.uri)));
      expect(ok.method).toBe(m);
    }
    // Long values are quoted cut, not echoed whole.
    const long = caught(() =>
      validateRequest(req('tools/call', { name: `n${'x'.repeat(3000)}`, _meta: meta() }), okHeaders('tools/call', 'short')),
    );
    expect(long.message).toBe(`Header mismatch: Mcp-Name header value 'short' does not match body value 'n${'x'.repeat(199)}…'`);
  });

  it('Mcp-Name in =?base64?…?= form is decoded before comparing', () => {
    const name = 'wéird tool ✓';
    const v = validateRequest(
      req('tools/call', { name, _meta: meta() }),
      okHeaders('tools/call', `=?base64?${Buffer.from(name).toString('base64')}?=`),
    );
    expect(v.params.name).toBe(name);
  });

  it('Mcp-Name is not required for list methods', () => {
    expect(validateRequest(req('tools/list', { _meta: meta() }), okHeaders('tools/list')).method).toBe('tools/list');
  });

  it('an empty params.name with an Mcp-Name header → -32602 / 400', () => {
    const e = caught(() => validateRequest(req('tools/call', { name: '', _meta: meta() }), okHeaders('tools/call', 'x')));
    expect(e.code).toBe(-32602);
    expect(e.httpStatus).toBe(400);
  });

  it('Mcp-Name with bad =?base64?…?= → -32020 / 400', () => {
    const e = caught(() =>
      validateRequest(req('tools/call', { name: 'echo', _meta: meta() }), okHeaders('tools/call', '=?base64?ZWNobw?=')),
    );
    expect(e.code).toBe(-32020);
    expect(e.httpStatus).toBe(400);
  });

  it('collects the Mcp-Param-* headers of a tools/call by lower-cased name, raw', () => {
    const h = okHeaders('tools/call', 'echo');
    h.set('Mcp-Param-Region', ' =?base64?ZXU=?= ');
    h.set('MCP-PARAM-Tenant-Id', 'acme');
    h.set('Mcp-Param-', 'ignored');
    const v = validateRequest(req('tools/call', { name: 'echo', _meta: meta() }), h);
    expect(v.paramHeaders).toEqual({ region: '=?base64?ZXU=?=', 'tenant-id': 'acme' });
    const list = okHeaders('tools/list');
    list.set('Mcp-Param-Region', 'eu');
    expect(validateRequest(req('tools/list', { _meta: meta() }), list).paramHeaders).toEqual({});
  });

  it('subscriptions/listen: the filter must be booleans and arrays of strings → -32602', () => {
    const ok = {
      toolsListChanged: true,
      promptsListChanged: false,
      resourcesListChanged: true,
      resourceSubscriptions: ['test://a'],
      taskIds: ['t'],
    };
    expect(
      validateRequest(req('subscriptions/listen', { notifications: ok, _meta: meta() }), okHeaders('subscriptions/listen')).params
        .notifications,
    ).toEqual(ok);
    for (const bad of [
      [],
      { toolsListChanged: 'yes' },
      { resourceSubscriptions: 'test://a' },
      { resourceSubscriptions: [1] },
      { taskIds: [null] },
    ]) {
      const e = caught(() =>
        validateRequest(req('subscriptions/listen', { notifications: bad, _meta: meta() }), okHeaders('subscriptions/listen')),
      );
      expect(e.code, JSON.stringify(bad)).toBe(-32602);
    }
  });
});

describe('quoted', () => {
  it('cuts a long value to 200 code units plus …, one less where the cut would split a surrogate pair', () => {
    expect(quoted('a'.repeat(200))).toBe('a'.repeat(200));
    expect(quoted('a'.repeat(201))).toBe(`${'a'.repeat(200)}…`);
    const cut = quoted(`${'a'.repeat(199)}😀${'b'.repeat(10)}`);
    expect(cut).toBe(`${'a'.repeat(199)}…`);
    expect(/[\ud800-\udbff]$/.test(cut.slice(0, -1))).toBe(false);
    expect(quoted(`${'a'.repeat(198)}😀${'b'.repeat(10)}`)).toBe(`${'a'.repeat(198)}😀…`);
  });
});
