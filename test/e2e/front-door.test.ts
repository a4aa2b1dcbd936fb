/**
 * The front door and the CLI around it, against real processes and sockets on 127.0.0.1.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, type CliGateway } from '../helpers/cli.js';
import { eventually, fixtureStdio } from '../helpers/fixture.js';
import { rpc } from '../helpers/gateway.js';
import { ROOT } from '../helpers/processes.js';

/** What a raw TCP client saw: the bytes the server sent, and when the server closed, in ms after the first write. */
interface RawResult {
  response: string;
  closedAfterMs: number;
}

/** Sends `payload` on a fresh TCP connection, then nothing more; resolves when the server closes the connection. */
function rawSend(port: number, payload: string, giveUpMs = 10_000): Promise<RawResult> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let response = '';
    let started = 0;
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`server kept the connection open for ${giveUpMs} ms; got: ${JSON.stringify(response)}`));
    }, giveUpMs);
    socket.on('connect', () => {
      started = performance.now();
      socket.write(payload);
    });
    socket.on('data', (d) => (response += d.toString()));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ response, closedAfterMs: performance.now() - started });
    });
  });
}

const head = (port: number, extra: string) => `POST /mcp/f HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\n${extra}`;

describe('LOG_LEVEL', () => {
  it('an unknown LOG_LEVEL → exit 2 with a one-line message naming it, no stack trace', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'mrtr-loglevel-')), 'gateway.config.json');
    writeFileSync(file, JSON.stringify({ upstreams: { f: fixtureStdio() } }));
    const r = await new Promise<{ code: number | null; stderr: string; stdout: string }>((resolve) => {
      execFile(process.execPath, ['--import', 'tsx', 'src/main.ts', '--config', file, '--port', '0'], { cwd: ROOT, env: { ...process.env, LOG_LEVEL: 'loud' }, timeout: 20_000 }, (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, stdout, stderr }),
      );
    });
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^mrtr-gateway: LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got 'loud'$/m);
    expect(r.stderr).not.toContain('    at ');
    expect(r.stdout).toBe('');
  });
});

describe('request read timeout and broken uploads (CLI, limits.requestReadTimeoutMs: 2000)', () => {
  let gw: CliGateway;
  beforeAll(async () => {
    gw = await startCli({ limits: { requestReadTimeoutMs: 2000 }, upstreams: { f: fixtureStdio() } }, undefined, { LOG_LEVEL: 'debug' });
  });
  afterAll(async () => {
    gw?.child.kill('SIGTERM');
    await gw?.exited;
  });

  const errorLines = () => gw.logs.filter((l) => l.level >= 50);

  it('headers and half a body, then a stall: 408 and the connection closed about 2 s after the request started', async () => {
    const r = await rawSend(gw.port, head(gw.port, 'Content-Length: 100\r\n\r\n{"jsonrpc":"2.0","id":1,"method":"tools/list",'));
    expect(r.response).toMatch(/^HTTP\/1\.1 408 /);
    expect(r.closedAfterMs).toBeGreaterThanOrEqual(1900);
    expect(r.closedAfterMs).toBeLessThan(3200);
  });

  it('half the headers, then a stall: 408 and the connection closed about 2 s after the request started', async () => {
    const r = await rawSend(gw.port, `POST /mcp/f HTTP/1.1\r\nHost: 127.0.0.1:${gw.port}\r\nContent-Ty`);
    expect(r.response).toMatch(/^HTTP\/1\.1 408 /);
    expect(r.closedAfterMs).toBeGreaterThanOrEqual(1900);
    expect(r.closedAfterMs).toBeLessThan(3200);
  });

  it('a chunked body that stalls: closed about 2 s after the request started, logged below warn', async () => {
    const r = await rawSend(gw.port, head(gw.port, 'Transfer-Encoding: chunked\r\n\r\n5\r\n{"jso\r\n'));
    expect(r.closedAfterMs).toBeGreaterThanOrEqual(1900);
    expect(r.closedAfterMs).toBeLessThan(3200);
    expect(await eventually(() => gw.logs.filter((l) => l.msg === 'request body not received').length > 0)).toBe(true);
    expect(errorLines()).toEqual([]);
  });

  it('a malformed chunked body gets 400; it is logged at debug level, never as an error', async () => {
    const before = gw.logs.filter((l) => l.msg === 'request body not received').length;
    const r = await rawSend(gw.port, head(gw.port, 'Transfer-Encoding: chunked\r\n\r\n5\r\n{"jso\r\nZZ\r\nnot a chunk\r\n'));
    expect(r.response).toMatch(/^HTTP\/1\.1 400 /);
    expect(r.closedAfterMs).toBeLessThan(1000);
    expect(await eventually(() => gw.logs.filter((l) => l.msg === 'request body not received').length > before)).toBe(true);
    const line = gw.logs.filter((l) => l.msg === 'request body not received').at(-1)!;
    expect(line.level).toBe(20);
    await new Promise((r2) => setTimeout(r2, 200));
    expect(errorLines()).toEqual([]);
    expect(gw.logs.filter((l) => l.msg === 'unexpected error')).toEqual([]);
  });

  it('a complete request on a fresh connection is still served', async () => {
    const r = await rpc(`${gw.base}/mcp/f`, 'tools/list');
    expect(r.status).toBe(200);
  });
});
