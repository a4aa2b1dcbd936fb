/**
 * Progress over the SSE response, and cancellation by closing it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { envelope, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually, FixtureLog, fixtureStdio } from '../helpers/fixture.js';

function post(
  url: string,
  id: number,
  params: Record<string, unknown>,
  signal?: AbortSignal,
  accept = 'application/json, text/event-stream',
) {
  return fetch(url, {
    method: 'POST',
    signal,
    headers: {
      'content-type': 'application/json',
      accept,
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': 'tools/call',
      'mcp-name': String(params.name),
    },
    body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params }),
  });
}

describe('progress and cancellation', () => {
  let gw: TestGateway;
  const log = new FixtureLog();
  beforeAll(async () => {
    gw = await startGateway({ upstreams: { f: fixtureStdio(log) } });
  });
  afterAll(() => gw?.close());

  it('streams progress notifications with the client token on SSE, then the result', async () => {
    const res = await post(gw.url('f'), 1, {
      name: 'slow',
      arguments: { ms: 300, steps: 3 },
      _meta: envelope({}, { progressToken: 'tok-1' }),
    });
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const events = (await res.text())
      .split('\n\n')
      .filter((b) => b.includes('data:'))
      .map((b) =>
        JSON.parse(
          b
            .split('\n')
            .find((l) => l.startsWith('data:'))!
            .slice(5),
        ),
      );
    expect(events.map((e) => e.method ?? 'result')).toEqual([
      'notifications/progress',
      'notifications/progress',
      'notifications/progress',
      'result',
    ]);
    expect(events.slice(0, 3).map((e) => [e.params.progressToken, e.params.progress, e.params.total])).toEqual([
      ['tok-1', 1, 3],
      ['tok-1', 2, 3],
      ['tok-1', 3, 3],
    ]);
    expect(events[3]).toMatchObject({
      jsonrpc: '2.0',
      id: 1,
      result: { resultType: 'complete', content: [{ type: 'text', text: 'slept 300ms' }] },
    });
  });

  it('answers plain JSON when the client did not ask for progress', async () => {
    const res = await post(gw.url('f'), 2, { name: 'slow', arguments: { ms: 100, steps: 2 }, _meta: envelope() });
    expect(res.headers.get('content-type')).toContain('application/json');
    expect((await res.json()).result.content[0].text).toBe('slept 100ms');
  });

  it('cancels the upstream call with notifications/cancelled carrying the upstream request id when the client closes the stream', async () => {
    const ac = new AbortController();
    const res = await post(
      gw.url('f'),
      3,
      { name: 'slow', arguments: { ms: 10_000, steps: 20 }, _meta: envelope({}, { progressToken: 'tok-2' }) },
      ac.signal,
    );
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toContain('notifications/progress');
    ac.abort();
    const calls = log.of('call', 'slow');
    const last = calls[calls.length - 1]!;
    // The upstream hop has its own request id and progress token, not the client's.
    expect(last.progressToken).not.toBe('tok-2');
    expect(
      await eventually(() => log.of('notification-cancelled').some((e) => e.pid === last.pid && e.requestId === last.requestId), 3000),
    ).toBe(true);
    expect(log.of('cancelled', 'slow').some((e) => e.pid === last.pid && e.requestId === last.requestId)).toBe(true);
  });
});
