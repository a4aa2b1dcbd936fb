import { describe, expect, it } from 'vitest';
import { clientEraOf } from '../../src/http/legacy-sessions.js';

const meta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
const modern = (id: number) => ({ jsonrpc: '2.0', id, method: 'tools/list', params: { _meta: meta } });
const legacy = (id: number, method = 'tools/list') => ({ jsonrpc: '2.0', id, method, params: {} });

describe('clientEraOf: which client era serves a POST body', () => {
  it('a request with the 2026-07-28 envelope is modern, even with an Mcp-Session-Id', () => {
    expect(clientEraOf(modern(1), undefined)).toBe('modern');
    expect(clientEraOf(modern(1), 'sid')).toBe('modern');
  });

  it('initialize without the envelope opens a legacy session, alone or in a batch', () => {
    expect(clientEraOf(legacy(1, 'initialize'), undefined)).toBe('legacy-initialize');
    expect(clientEraOf([legacy(1, 'initialize'), legacy(2)], undefined)).toBe('legacy-initialize');
  });

  it('a request without the envelope is in a legacy session with an Mcp-Session-Id, else modern (and refused there)', () => {
    expect(clientEraOf(legacy(1), 'sid')).toBe('legacy-session');
    expect(clientEraOf(legacy(1), undefined)).toBe('modern');
  });

  it('a batch is legacy unless every message carries the envelope: 2026-07-28 then refuses it as a batch; an empty batch is 2026-07-28 (an Invalid Request there)', () => {
    expect(clientEraOf([legacy(1), legacy(2)], 'sid')).toBe('legacy-session');
    expect(clientEraOf([legacy(1), legacy(2)], undefined)).toBe('legacy-session');
    expect(clientEraOf([modern(1), legacy(2)], undefined)).toBe('legacy-session');
    expect(clientEraOf([modern(1), modern(2)], undefined)).toBe('modern');
    expect(clientEraOf([], undefined)).toBe('modern');
    expect(clientEraOf([], 'sid')).toBe('modern');
  });
});
