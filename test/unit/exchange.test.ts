/**
 * The Exchange over a fake legacy session: server-initiated requests during a call become input
 * requests, answers reach the upstream, refusals carry the JSON-RPC codes the upstream sees, and
 * progress, cancellation and upstream errors end where they should.
 */
import { describe, expect, it } from 'vitest';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { UpstreamRequestLost, upstreamFailed } from '../../src/protocol/errors.js';
import { eventually, fakeCall, tick, upstreamConfig } from '../helpers/fake-call.js';

const FORM = { message: 'Your name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } };
const SAMPLE = { messages: [{ role: 'user', content: { type: 'text', text: 'hi' } }], maxTokens: 10 };
const SAMPLED = { role: 'assistant', content: { type: 'text', text: 'hello' }, model: 'm' };

describe('Exchange', () => {
  it('sends the legacy request upstream with its own progressToken and without 2026 fields', () => {
    const { ex, session } = fakeCall({ params: { name: 'ask', arguments: { q: 1 } } });
    ex.start();
    expect(session.sent).toHaveLength(1);
    expect(session.sent[0]).toEqual({
      method: 'tools/call',
      params: { name: 'ask', arguments: { q: 1 }, _meta: { progressToken: ex.id } },
    });
    expect(session.calls.get(ex.id)).toBe(ex);
  });

  it('an elicitation/create during the call becomes an input request; the answer resolves the upstream request and the result arrives', async () => {
    const { ex, session, lease, pool } = fakeCall();
    ex.start();
    const asked = session.ask('elicitation/create', { ...FORM, elicitationId: 'e1' });
    expect(await ex.settle(1000)).toBe('input');
    // Keyed by kind and sequence; `_meta` and `elicitationId` are not passed on.
    expect(ex.outstanding()).toEqual({ 'elicitation-1': { method: 'elicitation/create', params: FORM } });

    const reply = { action: 'accept', content: { name: 'Ada' } };
    expect(ex.answer('elicitation-1', reply)).toBe(true);
    await expect(asked.answer).resolves.toEqual(reply);
    expect(ex.outstanding()).toEqual({});

    session.resolve({ content: [{ type: 'text', text: 'Hello Ada' }] });
    expect(await ex.settle(1000)).toBe('done');
    expect(ex.outcome).toEqual({ result: { content: [{ type: 'text', text: 'Hello Ada' }] } });
    expect(lease.release).toHaveBeenCalledWith(true);
    expect(pool.noteSuccess).toHaveBeenCalledTimes(1);
    expect(session.calls.size).toBe(0);
  });

  it('sampling/createMessage and roots/list sent together form one batch; a key hint in _meta names the input', async () => {
    const { ex, session } = fakeCall();
    ex.start();
    const sampled = session.ask('sampling/createMessage', SAMPLE, 'pick-model');
    const roots = session.ask('roots/list', { ignored: true });
    expect(await ex.settle(1000)).toBe('input');
    expect(ex.outstanding()).toEqual({
      'pick-model': { method: 'sampling/createMessage', params: SAMPLE },
      'roots-1': { method: 'roots/list', params: {} },
    });
    ex.answer('roots-1', { roots: [{ uri: 'file:///w' }] });
    ex.answer('pick-model', SAMPLED);
    await expect(roots.answer).resolves.toEqual({ roots: [{ uri: 'file:///w' }] });
    await expect(sampled.answer).resolves.toEqual(SAMPLED);
  });

  it('an answer under a key that is not outstanding is not delivered', async () => {
    const { ex, session } = fakeCall();
    ex.start();
    session.ask('elicitation/create', FORM);
    await ex.settle(1000);
    expect(ex.answer('elicitation-9', { action: 'accept' })).toBe(false);
    expect(Object.keys(ex.outstanding())).toEqual(['elicitation-1']);
  });

  it('refuses upstream a method it does not relay (-32601), and a kind left out of input.allow (-32601)', async () => {
    const { ex, session } = fakeCall({ cfg: upstreamConfig({ input: { allow: ['elicitation'] } }) });
    ex.start();
    await expect(session.ask('ping/other').answer).rejects.toMatchObject({ code: -32601, message: expect.stringContaining('ping/other') });
    await expect(session.ask('sampling/createMessage', SAMPLE).answer).rejects.toMatchObject({
      code: -32601,
      message: expect.stringContaining('does not relay sampling/createMessage'),
    });
    expect(ex.outstanding()).toEqual({});
    expect(ex.outcome).toBeUndefined();
  });

  it('a request the client did not declare the capability for: -32602 upstream, and the call ends -32021 naming the capability', async () => {
    const { ex, session } = fakeCall({ clientCapabilities: { elicitation: {} } });
    ex.start();
    const asked = session.ask('sampling/createMessage', SAMPLE);
    await expect(asked.answer).rejects.toMatchObject({ code: -32602, message: expect.stringContaining('"sampling"') });
    expect(await ex.settle(1000)).toBe('done');
    const o = ex.outcome as { error: { code: number; data: unknown; httpStatus: number } };
    expect(o.error.code).toBe(-32021);
    expect(o.error.httpStatus).toBe(400);
    expect(o.error.data).toEqual({ requiredCapabilities: { sampling: {} } });
  });

  it('a prefilled answer of the right shape answers without a round; one of the wrong shape is ignored and the question asked', async () => {
    const good = fakeCall({ init: { prefilled: { 'elicitation-1': { action: 'decline' } } } });
    good.ex.start();
    await expect(good.session.ask('elicitation/create', FORM).answer).resolves.toEqual({ action: 'decline' });
    expect(good.ex.outstanding()).toEqual({});

    const bad = fakeCall({ init: { prefilled: { 'elicitation-1': { action: 'maybe' } } } });
    bad.ex.start();
    bad.session.ask('elicitation/create', FORM);
    expect(await bad.ex.settle(1000)).toBe('input');
    expect(Object.keys(bad.ex.outstanding())).toEqual(['elicitation-1']);
  });

  it('a form asking for a secret is declined upstream and never reaches the client', async () => {
    const { ex, session } = fakeCall();
    ex.start();
    const form = { message: 'Key?', requestedSchema: { type: 'object', properties: { password: { type: 'string' } } } };
    await expect(session.ask('elicitation/create', form).answer).resolves.toEqual({ action: 'decline' });
    expect(ex.outstanding()).toEqual({});
  });

  it('forwards upstream progress to the sink and keeps it as the status message', () => {
    const { ex, session } = fakeCall();
    ex.start();
    const seen: unknown[] = [];
    ex.setProgressSink((p) => seen.push(p));
    session.progress({ progress: 1, total: 2 });
    session.progress({ progress: 2, message: 'almost' });
    expect(seen).toEqual([
      { progress: 1, total: 2 },
      { progress: 2, message: 'almost' },
    ]);
    expect(ex.statusMessage).toBe('almost');
  });

  it('a request the upstream withdraws is no longer outstanding', async () => {
    const { ex, session } = fakeCall();
    ex.start();
    const asked = session.ask('elicitation/create', FORM);
    await ex.settle(1000);
    asked.withdraw();
    expect(ex.outstanding()).toEqual({});
  });

  it('cancel: a pending elicitation gets {action:"cancel"}, a pending sampling an error, then notifications/cancelled goes upstream', async () => {
    const { ex, session, lease } = fakeCall();
    ex.start();
    const form = session.ask('elicitation/create', FORM);
    const sample = session.ask('sampling/createMessage', SAMPLE);
    await ex.settle(1000);
    const err = upstreamFailed('u', 'cancelled', 'The client closed the request');
    ex.cancel(err);
    await expect(form.answer).resolves.toEqual({ action: 'cancel' });
    await expect(sample.answer).rejects.toMatchObject({ code: -32603, message: expect.stringContaining('The client closed the request') });
    expect(ex.outcome).toEqual({ error: err });
    expect(session.cancels).toEqual([]);
    await eventually(() => session.cancels.length > 0);
    expect(session.cancels).toEqual([{ token: ex.id, reason: 'The client closed the request' }]);
    // A cancelled call's session is not put back warm: it waits for the upstream's answer, if any.
    expect(lease.release).not.toHaveBeenCalled();
  });

  it("relays the upstream's own error without the SDK prefix and keeps the session", async () => {
    const { ex, session, lease } = fakeCall();
    ex.start();
    session.reject(new McpError(-32602, 'MCP error -32602: bad cursor', { cursor: 'x' }));
    expect(await ex.settle(1000)).toBe('done');
    expect(ex.outcome).toMatchObject({ error: { code: -32602, message: 'bad cursor', data: { cursor: 'x' } } });
    expect(lease.release).toHaveBeenCalledWith(true);
  });

  it('resources/read failing with the legacy -32002 becomes -32602 "Resource not found" with data.uri', async () => {
    const { ex, session } = fakeCall({ method: 'resources/read', params: { uri: 'file:///gone' } });
    ex.start();
    session.reject(new McpError(-32002, 'no such resource'));
    await ex.settle(1000);
    expect(ex.outcome).toMatchObject({ error: { code: -32602, message: 'Resource not found', data: { uri: 'file:///gone' } } });
  });

  it('a lost connection is -32603 crashed on stdio and session-lost on HTTP, and the session is closed', async () => {
    const http = fakeCall();
    http.ex.start();
    http.session.reject(new UpstreamRequestLost('closed', 'socket hang up'));
    await http.ex.settle(1000);
    expect(http.ex.outcome).toMatchObject({ error: { code: -32603, data: { upstream: 'u', reason: 'session-lost' } } });
    expect(http.lease.release).toHaveBeenCalledWith(false);

    const stdio = fakeCall();
    stdio.session.transportKind = 'stdio';
    stdio.ex.start();
    stdio.session.reject(new UpstreamRequestLost('closed', 'exit 1'));
    await stdio.ex.settle(1000);
    expect(stdio.ex.outcome).toMatchObject({ error: { code: -32603, data: { reason: 'crashed' } } });
  });

  it('a call silent for requestMs is cancelled with -32603 timeout; time waiting on the client does not count', async () => {
    const { ex, session } = fakeCall({ cfg: upstreamConfig({ timeouts: { requestMs: 80 } }) });
    ex.start();
    session.ask('elicitation/create', FORM);
    expect(await ex.settle(1000)).toBe('input');
    // Waiting on the client: well past requestMs without a timeout.
    await tick(150);
    expect(ex.outcome).toBeUndefined();
    ex.answer('elicitation-1', { action: 'decline' });
    expect(await ex.settle(1000)).toBe('done');
    expect(ex.outcome).toMatchObject({
      error: { code: -32603, data: { reason: 'timeout' }, message: expect.stringContaining('requestMs=80') },
    });
    await eventually(() => session.cancels.length > 0);
    expect(session.cancels).toHaveLength(1);
  });
  it('-32042 URL elicitation required: each elicitation becomes a URL input request; accepted, the request goes upstream again', async () => {
    const { ex, session } = fakeCall();
    ex.start();
    const elicitation = { message: 'Sign in', url: 'https://example.com/auth', elicitationId: 'e9' };
    session.reject(new McpError(-32042, 'URL elicitation required', { elicitations: [elicitation] }));
    expect(await ex.settle(1000)).toBe('input');
    expect(ex.outstanding()).toEqual({
      'elicitation-1': { method: 'elicitation/create', params: { message: 'Sign in', url: 'https://example.com/auth', mode: 'url' } },
    });
    ex.answer('elicitation-1', { action: 'accept' });
    await eventually(() => session.sent.length === 2);
    expect(session.sent[1]).toEqual(session.sent[0]);
    session.resolve({ content: [] });
    expect(await ex.settle(1000)).toBe('done');
    expect(ex.outcome).toEqual({ result: { content: [] } });
  });

  it('-32042 URL elicitation declined by the client: -32603 declined naming the URL, never -32042 downstream', async () => {
    const { ex, session } = fakeCall();
    ex.start();
    session.reject(new McpError(-32042, 'URL elicitation required', { elicitations: [{ message: 'm', url: 'https://example.com/a' }] }));
    await ex.settle(1000);
    ex.answer('elicitation-1', { action: 'decline' });
    expect(await ex.settle(1000)).toBe('done');
    expect(ex.outcome).toMatchObject({
      error: { code: -32603, data: { reason: 'declined' }, message: expect.stringContaining('https://example.com/a') },
    });
    expect(session.sent).toHaveLength(1);
  });
});
