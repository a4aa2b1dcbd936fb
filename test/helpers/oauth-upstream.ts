/**
 * A protected MCP upstream for tests: a v1 SDK server (`McpServer` + stateful
 * `StreamableHTTPServerTransport`) on http://127.0.0.1:<port 0>/mcp that accepts only bearer JWTs
 * of one authorization server (issuer, audience = its own resource URL, expiry), serves its RFC 9728
 * protected resource metadata and records who called what. Also the stdio counterpart (a fixture
 * whose `whoami` reads its token from the environment) and a v1 SDK client that sends a bearer token.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { createRemoteJWKSet, jwtVerify, type JWTPayload } from 'jose';
import * as z from 'zod/v4';

/** Options of {@link startProtectedUpstream}. */
export interface ProtectedUpstreamOptions {
  /** The authorization server's issuer (tokens' `iss`; listed in the metadata's `authorization_servers`). */
  issuer: string;
  /** Where the issuer's signing keys are (`AuthServer.jwksUri`). */
  jwksUri: string;
  /** The `aud` accepted instead of the server's own resource URL (for a wrong-audience test). */
  audience?: string;
  /** `scopes_supported` in the metadata (default `["mcp"]`). */
  scopes?: string[];
}

/** One request the upstream accepted, in order. */
export interface UpstreamRequest {
  /** The JSON-RPC method (`"response"` for a client's answer, a batch's first method), or the HTTP method of a GET/DELETE. */
  method: string;
  sub: string;
  aud: string;
  /** The token's `exp`, ms since the epoch. */
  tokenExpMs: number;
  sessionId?: string;
}

/** One request the upstream refused (401, or 403 for a session of another subject). */
export interface UpstreamRefusal {
  status: number;
  /** Why, as in the `error_description` (no token in it). */
  reason: string;
}

/** A running {@link startProtectedUpstream}. */
export interface ProtectedUpstream {
  /** `http://127.0.0.1:<port>/mcp`: the MCP endpoint, and the resource identifier (RFC 8707 / RFC 9728). */
  url: string;
  /** Same as {@link url}: the `resource` the tokens must name. */
  resource: string;
  /** `http://127.0.0.1:<port>`. */
  origin: string;
  /** `<origin>/.well-known/oauth-protected-resource/mcp` (the RFC 9728 document). */
  metadataUrl: string;
  /** Accepted requests, in order. */
  requests: UpstreamRequest[];
  refusals: UpstreamRefusal[];
  /** From now on accept tokens for `audience` (undefined: the server's own resource URL again). */
  setAudience(audience?: string): void;
  /** Empties {@link requests} and {@link refusals}. */
  clear(): void;
  close(): Promise<void>;
}

/**
 * Starts the protected upstream. Every request to /mcp needs `Authorization: Bearer <JWT>` signed
 * by a key at `jwksUri`, with `iss` = `issuer`, `aud` containing the resource URL (or
 * `opts.audience`) and an `exp` in the future; otherwise HTTP 401 with `WWW-Authenticate: Bearer
 * resource_metadata="<metadataUrl>"` (no token) or `Bearer error="invalid_token",
 * error_description="…", resource_metadata="<metadataUrl>"` (a bad token), RFC 6750 §3 / RFC 9728
 * §5.1. Sessions are bound to the `sub` that opened them: another subject's token on that session
 * gets 403 `error="invalid_token"`. Tools: `whoami` answers `{"sub","aud"}` as JSON text; `echo`
 * answers its `text` argument.
 */
export async function startProtectedUpstream(opts: ProtectedUpstreamOptions): Promise<ProtectedUpstream> {
  const keys = createRemoteJWKSet(new URL(opts.jwksUri));
  const sessions = new Map<string, { transport: StreamableHTTPServerTransport; sub: string }>();
  const requests: UpstreamRequest[] = [];
  const refusals: UpstreamRefusal[] = [];
  const sockets = new Set<Socket>();
  let origin = '';
  const http = createServer((req, res) => {
    handle(req, res).catch((err: Error) => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end(`upstream error: ${err.message}`);
    });
  });
  http.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  origin = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
  const url = `${origin}/mcp`;
  const metadataUrl = `${origin}/.well-known/oauth-protected-resource/mcp`;
  let audience = opts.audience ?? url;

  function refuse(res: ServerResponse, status: number, reason: string, error?: string): void {
    refusals.push({ status, reason });
    const challenge = [
      ...(error ? [`error="${error}"`, `error_description="${reason.replace(/["\\]/g, '')}"`] : []),
      `resource_metadata="${metadataUrl}"`,
    ].join(', ');
    res.writeHead(status, { 'www-authenticate': `Bearer ${challenge}`, 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: error ?? 'unauthorized', error_description: reason }));
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? '/', origin).pathname;
    if (path === '/.well-known/oauth-protected-resource/mcp' || path === '/.well-known/oauth-protected-resource') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          resource: url,
          authorization_servers: [opts.issuer],
          scopes_supported: opts.scopes ?? ['mcp'],
          bearer_methods_supported: ['header'],
        }),
      );
      return;
    }
    if (path !== '/mcp') return void res.writeHead(404).end();
    const header = req.headers.authorization ?? '';
    const token = /^Bearer\s+(\S+)$/i.exec(header)?.[1];
    if (!token) return refuse(res, 401, 'no bearer token');
    let claims: JWTPayload;
    try {
      claims = (await jwtVerify(token, keys, { issuer: opts.issuer, audience })).payload;
    } catch (err) {
      return refuse(res, 401, `token refused: ${(err as Error).message}`, 'invalid_token');
    }
    const sub = String(claims.sub);
    const aud = Array.isArray(claims.aud) ? claims.aud.join(' ') : String(claims.aud);
    const body = req.method === 'POST' ? await readJson(req) : undefined;
    const sid = req.headers['mcp-session-id'] as string | undefined;
    const session = sid ? sessions.get(sid) : undefined;
    if (session && session.sub !== sub) return refuse(res, 403, `session belongs to another subject`, 'invalid_token');
    requests.push({ method: methodOf(req, body), sub, aud, tokenExpMs: Number(claims.exp) * 1000, sessionId: sid });
    (req as IncomingMessage & { auth?: unknown }).auth = {
      token,
      clientId: String(claims.client_id ?? ''),
      scopes: typeof claims.scope === 'string' ? claims.scope.split(' ') : [],
      expiresAt: claims.exp,
      extra: { sub, aud },
    };
    if (session) return session.transport.handleRequest(req, res, body);
    if (sid) return void res.writeHead(404, { 'content-type': 'application/json' }).end(rpcError('session not found'));
    if (req.method !== 'POST' || !isInitializeRequest(body)) {
      return void res.writeHead(400, { 'content-type': 'application/json' }).end(rpcError('no session: initialize first'));
    }
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: randomUUID,
      onsessioninitialized: (id) => void sessions.set(id, { transport, sub }),
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
    };
    await buildServer().connect(transport);
    await transport.handleRequest(req, res, body);
  }

  return {
    url,
    resource: url,
    origin,
    metadataUrl,
    requests,
    refusals,
    setAudience: (aud) => {
      audience = aud ?? url;
    },
    clear: () => {
      requests.length = 0;
      refusals.length = 0;
    },
    close: async () => {
      for (const { transport } of [...sessions.values()]) await transport.close().catch(() => {});
      await new Promise<void>((r) => {
        http.close(() => r());
        for (const s of sockets) s.destroy();
      });
    },
  };
}

function buildServer(): McpServer {
  const mcp = new McpServer({ name: 'protected-upstream', version: '1.0.0' });
  mcp.registerTool('whoami', { description: "The caller's token subject and audience" }, async (extra) => {
    const who = (extra.authInfo?.extra ?? {}) as { sub?: string; aud?: string };
    return { content: [{ type: 'text', text: JSON.stringify({ sub: who.sub, aud: who.aud }) }] };
  });
  mcp.registerTool('echo', { description: 'Answers its text', inputSchema: { text: z.string() } }, async ({ text }) => ({
    content: [{ type: 'text', text }],
  }));
  return mcp;
}

function methodOf(req: IncomingMessage, body: unknown): string {
  const first = Array.isArray(body) ? body[0] : body;
  if (first && typeof first === 'object') {
    const m = (first as { method?: unknown }).method;
    return typeof m === 'string' ? m : 'response';
  }
  return req.method ?? 'GET';
}

function rpcError(message: string): string {
  return JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message } });
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  try {
    return text ? JSON.parse(text) : undefined;
  } catch {
    return undefined;
  }
}

/** The stdio fixture whose `whoami` answers `{token, sub, aud, pid}` from the variable named by its argument. */
export const PROTECTED_STDIO_FIXTURE = fileURLToPath(new URL('../fixtures/oauth-stdio-server.ts', import.meta.url));

/**
 * Upstream config (the gateway's `upstreams.NAME`) for {@link PROTECTED_STDIO_FIXTURE} over stdio:
 * its `whoami` answers the value of env var `envVar` (`token`: the token the gateway put there,
 * null when unset), its `sub` and `aud` when it is a JWT (decoded, not verified) and the child's `pid`.
 */
export function protectedStdio(envVar: string): { transport: 'stdio'; command: string; args: string[] } {
  return { transport: 'stdio', command: process.execPath, args: ['--import', 'tsx', PROTECTED_STDIO_FIXTURE, envVar] };
}

/**
 * A connected v1 SDK client (Streamable HTTP) that sends `Authorization: Bearer <token>` on every
 * request to `url`. Rejects (a `StreamableHTTPError`, code = HTTP status) when the server refuses it.
 */
export async function connectWithToken(url: string, token: string): Promise<Client> {
  const client = new Client({ name: 'oauth-test-client', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return client;
}

/** Calls `whoami` through `client` and parses its JSON text (`{sub, aud}` on HTTP, `{token, sub, aud, pid}` on stdio). */
export async function whoami(client: Client): Promise<Record<string, unknown>> {
  const r = (await client.callTool({ name: 'whoami', arguments: {} })) as { content: { type: string; text?: string }[] };
  return JSON.parse(r.content[0]?.text ?? '{}');
}
