/**
 * The bridge on every legacy transport: the v2 client (2026-07-28) through the gateway in front
 * of the v1-SDK legacy fixture over stdio, Streamable HTTP and HTTP+SSE.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from '../helpers/gateway.js';
import { FixtureLog, fixtureStdio, startFixtureHttp } from '../helpers/fixture.js';
import { rounds, textOf, v2Client } from '../helpers/v2client.js';

const transports: [string, (log: FixtureLog) => Promise<{ config: Record<string, unknown>; stop: () => Promise<void> }>][] = [
  ['stdio', async (log) => ({ config: fixtureStdio(log), stop: async () => {} })],
  ['streamable-http', async (log) => startFixtureHttp('http', log)],
  ['sse', async (log) => startFixtureHttp('sse', log)],
];

describe.each(transports)('bridge over %s', (_label, start) => {
  let gw: TestGateway;
  let stop: () => Promise<void>;
  let url: string;
  const log = new FixtureLog();

  beforeAll(async () => {
    const up = await start(log);
    stop = up.stop;
    gw = await startGateway({ upstreams: { legacy: up.config } });
    url = gw.url('legacy');
  });
  afterAll(async () => {
    await gw?.close();
    await stop?.();
  });

  it('a tool that elicits: one round, the answer reaches the tool', async () => {
    const { client, record } = await v2Client(url, { elicit: () => ({ action: 'accept', content: { name: 'Grace' } }) });
    try {
      const r = await client.callTool({ name: 'ask_name', arguments: { greeting: 'Welcome' } });
      expect(textOf(r)).toBe('Welcome, Grace!');
      expect(record.elicitation).toHaveLength(1);
      expect(rounds(record)).toBe(1);
    } finally {
      await client.close();
    }
  });

  it('a tool that samples: the client sampling handler answers', async () => {
    const { client, record } = await v2Client(url, {
      sample: () => ({ role: 'assistant', model: 'm1', content: { type: 'text', text: 'short' } }),
    });
    try {
      const r = await client.callTool({ name: 'summarize', arguments: { text: 'a long text' } });
      expect(textOf(r)).toBe('model=m1 summary=short');
      expect(record.sampling[0].messages[0].content.text).toBe('Summarize: a long text');
    } finally {
      await client.close();
    }
  });

  it('elicitation, then sampling, then roots: three rounds', async () => {
    const { client, record } = await v2Client(url, {
      elicit: () => ({ action: 'accept', content: { topic: 'otters' } }),
      sample: (p) => ({ role: 'assistant', model: 'm', content: { type: 'text', text: `line for ${p.messages[0].content.text}` } }),
      roots: [{ uri: 'file:///home/otter', name: 'otter' }],
    });
    try {
      const r = await client.callTool({ name: 'three_rounds', arguments: {} });
      expect(JSON.parse(textOf(r))).toEqual({ topic: 'otters', line: 'line for One line about otters', roots: ['file:///home/otter'] });
      expect(rounds(record)).toBe(3);
      expect([record.elicitation.length, record.sampling.length, record.roots]).toEqual([1, 1, 1]);
    } finally {
      await client.close();
    }
  });

  it('two inputs asked concurrently come out as one round, under their hinted keys', async () => {
    const { client, record } = await v2Client(url, {
      elicit: () => ({ action: 'accept', content: { name: 'Lin' } }),
      sample: () => ({ role: 'assistant', model: 'm', content: { type: 'text', text: 'hi!' } }),
    });
    try {
      const r = await client.callTool({ name: 'concurrent_inputs', arguments: {} });
      expect(textOf(r)).toBe('name=Lin sample=hi!');
      expect(rounds(record)).toBe(1);
      const round = record.results.find((x) => x.resultType === 'input_required');
      expect(Object.keys(round.inputRequests).sort()).toEqual(['hello', 'who']);
    } finally {
      await client.close();
    }
  });

  it('prompts/get of a prompt that elicits', async () => {
    const { client, record } = await v2Client(url, { elicit: () => ({ action: 'accept', content: { name: 'Ravi' } }) });
    try {
      const r = await client.getPrompt({ name: 'greeting_prompt', arguments: { style: 'formal' } });
      expect(r.messages[0]!.content).toEqual({ type: 'text', text: 'Greet Ravi in a formal way' });
      expect(rounds(record)).toBe(1);
    } finally {
      await client.close();
    }
  });

  it('resources/read of a resource that elicits', async () => {
    const { client, record } = await v2Client(url, { elicit: () => ({ action: 'accept', content: { ok: true } }) });
    try {
      const r = await client.readResource({ uri: 'fixture://notes/secret' });
      expect(r.contents[0]).toMatchObject({ uri: 'fixture://notes/secret', text: 'the note says hi' });
      expect(record.elicitation).toHaveLength(1);
      expect(rounds(record)).toBe(1);
    } finally {
      await client.close();
    }
  });

  it('a form asking for a password is not forwarded: the upstream gets decline', async () => {
    const { client, record } = await v2Client(url);
    try {
      const r = await client.callTool({ name: 'ask_password', arguments: {} });
      expect(textOf(r)).toBe('action=decline');
      expect(record.elicitation).toHaveLength(0);
      expect(rounds(record)).toBe(0);
      expect(log.of('elicit-result', 'ask_password').at(-1)!.result).toEqual({ action: 'decline' });
    } finally {
      await client.close();
    }
  });

  it('URL-mode elicitation/create becomes a URL input request without elicitationId; accept reaches the upstream', async () => {
    const { client, record } = await v2Client(url, { elicit: () => ({ action: 'accept' }) });
    try {
      const r = await client.callTool({ name: 'url_consent', arguments: {} });
      expect(textOf(r)).toBe('url consent: accept');
      expect(record.elicitation[0]).toMatchObject({
        mode: 'url',
        url: 'https://example.com/authorize?session=fixture',
        message: 'Authorize access',
      });
      expect(record.elicitation[0].elicitationId).toBeUndefined();
    } finally {
      await client.close();
    }
  });

  it('-32042 URL elicitation required becomes a URL input request; after accept the gateway calls the tool again', async () => {
    const { client, record } = await v2Client(url, { elicit: () => ({ action: 'accept' }) });
    try {
      const r = await client.callTool({ name: 'url_required', arguments: {} });
      expect(textOf(r)).toMatch(/^connected after \d+ attempts$/);
      expect(record.elicitation).toHaveLength(1);
      expect(record.elicitation[0]).toMatchObject({ mode: 'url', url: 'https://example.com/connect' });
      expect(record.elicitation[0].elicitationId).toBeUndefined();
    } finally {
      await client.close();
    }
  });
});
