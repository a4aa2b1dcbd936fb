/**
 * Mcp-Param-{Name} headers (SEP-2243) in front of the legacy conformance fixture over stdio: its
 * `test_header_params` tool annotates `region` (string), `priority` (integer), `verbose`
 * (boolean), `target.host` (nested string) and `note` (nullable string) with `x-mcp-header`;
 * `test_invalid_header_tool` annotates a `number`, which the rules forbid.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { conformanceUpstream } from '../helpers/fixture.js';
import { rpc, startGateway, type TestGateway } from '../helpers/gateway.js';

const TOOL = 'test_header_params';
const b64 = (s: string) => `=?base64?${Buffer.from(s, 'utf8').toString('base64')}?=`;

describe('Mcp-Param-* headers against x-mcp-header annotations', () => {
  let gw: TestGateway;
  let url: string;
  beforeAll(async () => {
    gw = await startGateway({ upstreams: { conformance: conformanceUpstream() } });
    url = gw.url('conformance');
  });
  afterAll(() => gw?.close());

  const call = (args: Record<string, unknown>, headers: Record<string, string>) =>
    rpc(url, 'tools/call', { name: TOOL, arguments: args }, { headers });
  const expectMismatch = (r: Awaited<ReturnType<typeof call>>, header: string) => {
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.error.code).toBe(-32020);
    expect(r.body.error.message).toContain(header);
  };

  it('tools/list keeps the annotations and leaves out the tool whose annotation is invalid', async () => {
    const r = await rpc(url, 'tools/list');
    const names = r.body.result.tools.map((t: { name: string }) => t.name);
    expect(names).toContain(TOOL);
    expect(names).not.toContain('test_invalid_header_tool');
    const tool = r.body.result.tools.find((t: { name: string }) => t.name === TOOL);
    expect(tool.inputSchema.properties.region['x-mcp-header']).toBe('Region');
    expect(tool.inputSchema.properties.target.properties.host['x-mcp-header']).toBe('Target-Host');
  });

  it('calling the tool left out of tools/list → -32602', async () => {
    const r = await rpc(
      url,
      'tools/call',
      { name: 'test_invalid_header_tool', arguments: { ratio: 0.5 } },
      { headers: { 'mcp-param-ratio': '0.5' } },
    );
    expect(r.status).toBe(200);
    expect(r.body.error.code).toBe(-32602);
    expect(r.body.error.message).toContain('test_invalid_header_tool');
  });

  it('every header present and matching (plain, Base64, integer, boolean, nested) → the call runs', async () => {
    const r = await call(
      { region: 'us-west1', priority: 42, verbose: true, target: { host: 'db.internal' }, query: 'SELECT 1' },
      { 'mcp-param-region': 'us-west1', 'mcp-param-priority': '42', 'Mcp-Param-Verbose': 'true', 'MCP-PARAM-TARGET-HOST': 'db.internal' },
    );
    expect(r.status).toBe(200);
    expect(r.body.result.content[0].text).toContain('us-west1');
    const encoded = await call({ region: 'Zürich, 世界' }, { 'mcp-param-region': b64('Zürich, 世界') });
    expect(encoded.body.result.content[0].text).toContain('Zürich');
  });

  it('integers compare numerically', async () => {
    expect((await call({ region: 'eu', priority: 42 }, { 'mcp-param-region': 'eu', 'mcp-param-priority': '42.0' })).status).toBe(200);
    expectMismatch(
      await call({ region: 'eu', priority: 42 }, { 'mcp-param-region': 'eu', 'mcp-param-priority': '43' }),
      'Mcp-Param-Priority',
    );
  });

  it('an argument that is absent or null needs no header', async () => {
    const r = await call({ region: 'eu', note: null }, { 'mcp-param-region': 'eu' });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.result.isError).toBeFalsy();
  });

  it('a value in the body without its header → 400 / -32020', async () => {
    expectMismatch(await call({ region: 'eu' }, {}), 'Mcp-Param-Region');
    expectMismatch(await call({ region: 'eu', target: { host: 'h' } }, { 'mcp-param-region': 'eu' }), 'Mcp-Param-Target-Host');
  });

  it('a header that differs from the body → 400 / -32020', async () => {
    expectMismatch(await call({ region: 'eu' }, { 'mcp-param-region': 'us' }), 'Mcp-Param-Region');
    expectMismatch(
      await call({ region: 'eu', verbose: false }, { 'mcp-param-region': 'eu', 'mcp-param-verbose': 'False' }),
      'Mcp-Param-Verbose',
    );
  });

  it('a header for an argument that is absent → 400 / -32020', async () => {
    expectMismatch(await call({ region: 'eu' }, { 'mcp-param-region': 'eu', 'mcp-param-note': 'hello' }), 'Mcp-Param-Note');
  });

  it('characters a header value may not carry → 400 / -32020', async () => {
    // A raw Latin-1 byte: fetch sends it as is; it had to be =?base64?…?= encoded.
    expectMismatch(await call({ region: 'café' }, { 'mcp-param-region': 'caf\u00e9' }), 'Mcp-Param-Region');
  });

  it('bad =?base64?…?= (padding, alphabet) → 400 / -32020; a value with only one sentinel end is literal', async () => {
    expectMismatch(await call({ region: 'Hello' }, { 'mcp-param-region': '=?base64?SGVsbG8?=' }), 'Mcp-Param-Region');
    expectMismatch(await call({ region: 'Hello' }, { 'mcp-param-region': '=?base64?SGVs!!!bG8=?=' }), 'Mcp-Param-Region');
    expect((await call({ region: '=?base64?SGVsbG8=' }, { 'mcp-param-region': '=?base64?SGVsbG8=' })).status).toBe(200);
  });

  it('headers no annotation names are ignored', async () => {
    expect((await call({ region: 'eu' }, { 'mcp-param-region': 'eu', 'mcp-param-unknown': 'whatever' })).status).toBe(200);
  });
});
