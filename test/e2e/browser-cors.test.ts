/**
 * CORS with a real browser: Debian's chromium (headless, driven by playwright-core) loads a page
 * from one origin whose script POSTs a 2026-07-28 `server/discover` with the Mcp-* headers (and
 * the W3C Trace Context headers browser OpenTelemetry adds) to the
 * gateway on another port. The headers force a preflight; the call must pass from an allowed
 * origin and be blocked from any other.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Browser } from 'playwright-core';
import { launchChromium } from '../helpers/chromium.js';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createLogger } from '../../src/observability/log.js';
import { fixtureStdio } from '../helpers/fixture.js';
import { startGateway, type TestGateway } from '../helpers/gateway.js';
import { describeWith } from '../helpers/installed.js';
import { scaled } from '../helpers/budget.js';

/** The page: on load, POSTs server/discover to the gateway URL in `?gw=` and stores the outcome in `window.result`. */
const PAGE = `<!doctype html>
<html><head><title>mcp browser client</title></head><body><script>
(async () => {
  const gw = new URLSearchParams(location.search).get('gw');
  const meta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
  try {
    const res = await fetch(gw, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': '2026-07-28',
        'mcp-method': 'server/discover',
        'mcp-param-region': 'eu-west',
        traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
        tracestate: 'vendor=opaque',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'server/discover', params: { _meta: meta } }),
    });
    window.result = { ok: true, status: res.status, requestId: res.headers.get('x-request-id'), body: await res.json() };
  } catch (e) {
    window.result = { ok: false, error: String(e) };
  }
})();
</script></body></html>`;

/** Serves {@link PAGE} on `host`, on an ephemeral port. */
async function servePage(host: string): Promise<{ server: Server; origin: string }> {
  const server = createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(PAGE));
  await new Promise<void>((r) => server.listen(0, host, r));
  return { server, origin: `http://${host}:${(server.address() as AddressInfo).port}` };
}

describeWith(['chromium'], 'CORS in a real browser (Debian chromium)', () => {
  let browser: Browser;
  let gw: TestGateway;
  let allowed: { server: Server; origin: string };
  let otherHost: { server: Server; origin: string };
  let otherPort: { server: Server; origin: string };
  const logs: Record<string, any>[] = [];

  beforeAll(async () => {
    allowed = await servePage('127.0.0.1');
    otherPort = await servePage('127.0.0.1');
    otherHost = await servePage('127.0.0.2');
    const log = createLogger('info', { write: (line: string) => void logs.push(JSON.parse(line)) });
    gw = await startGateway({ http: { allowedOrigins: [allowed.origin] }, upstreams: { f: fixtureStdio() } }, { log });
    browser = await launchChromium();
  }, scaled(60_000));

  afterAll(async () => {
    await browser?.close();
    await gw?.close();
    for (const s of [allowed, otherPort, otherHost]) if (s) await new Promise((r) => s.server.close(r));
  });

  /** Loads the page from `origin` and waits for its script's outcome. */
  async function callFrom(origin: string): Promise<any> {
    const page = await browser.newPage();
    try {
      await page.goto(`${origin}/?gw=${encodeURIComponent(gw.url('f'))}`);
      await page.waitForFunction(() => (window as unknown as { result?: unknown }).result !== undefined, undefined, {
        timeout: scaled(20_000),
      });
      return await page.evaluate(() => (window as unknown as { result: unknown }).result);
    } finally {
      await page.close();
    }
  }

  it(
    'a page from an allowed origin passes the preflight and reads the result and the exposed x-request-id',
    async () => {
      const r = await callFrom(allowed.origin);
      expect(r).toMatchObject({ ok: true, status: 200 });
      expect(r.body.result).toBeDefined();
      expect(r.requestId).toMatch(/^[0-9a-f-]{36}$/);
    },
    scaled(30_000),
  );

  it(
    'a page from another port, or from 127.0.0.2, is blocked at the preflight',
    async () => {
      for (const origin of [otherPort.origin, otherHost.origin]) {
        const before = logs.filter((l) => l.preflight).length;
        const r = await callFrom(origin);
        expect(r.ok, origin).toBe(false);
        expect(r.error).toMatch(/Failed to fetch/);
        const refused = logs.filter((l) => l.preflight).slice(before);
        expect(refused.map((l) => l.reason)).toEqual([`Origin '${origin}' is not allowed`]);
      }
    },
    scaled(30_000),
  );
});
