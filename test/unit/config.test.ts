/**
 * The generated JSON Schema is current, and the shipped configs validate.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, configJsonSchema, parseConfig } from '../../src/config/load.js';
import { ROOT } from '../helpers/processes.js';

const fakeEnv: NodeJS.ProcessEnv = {
  ...process.env,
  MRTR_STATE_SECRET: 'test-state-secret-0123456789abcdefghijklmnop',
  UPSTREAM_TOKEN: 'test-upstream-token',
  MRTR_API_KEY: 'test-api-key-0123456789',
};

function readJson(file: string): unknown {
  return JSON.parse(readFileSync(file, 'utf8'));
}

describe('config/gateway.schema.json', () => {
  it('equals configJsonSchema() with the title gen-schema.ts prepends (run `npm run schema` if this fails)', () => {
    const committed = readJson(join(ROOT, 'config/gateway.schema.json'));
    const generated = JSON.parse(JSON.stringify({ title: 'mrtr-gateway configuration', ...configJsonSchema() }));
    expect(committed).toEqual(generated);
  });
});

describe('shipped configs', () => {
  it('gateway.config.json parses with parseConfig', () => {
    const cfg = parseConfig(readJson(join(ROOT, 'gateway.config.json')), fakeEnv, ROOT);
    expect(Object.keys(cfg.upstreams).length).toBeGreaterThan(0);
  });

  it('config/container.json (the image default) parses and requires an API key', () => {
    const raw = readJson(join(ROOT, 'config/container.json'));
    expect(parseConfig(raw, fakeEnv, ROOT).auth.mode).toBe('apiKeys');
    expect(() => parseConfig(raw, {}, ROOT)).toThrow(/MRTR_API_KEY/);
  });

  it('config/replicas/gateway.json (the compose recipe) parses: Redis store, replica secret and advertised URL from the environment', () => {
    const env = {
      ...fakeEnv,
      MRTR_API_KEY: 'k'.repeat(20),
      REQUEST_STATE_SECRET: 's'.repeat(32),
      REPLICA_SECRET: 'r'.repeat(32),
      REDIS_URL: 'redis://redis:6379',
      ADVERTISE_URL: 'http://gateway-a:8787',
    };
    const cfg = parseConfig(readJson(join(ROOT, 'config/replicas/gateway.json')), env, join(ROOT, 'config/replicas'));
    expect(cfg.store).toMatchObject({ kind: 'redis', url: 'redis://redis:6379' });
    expect(cfg.replicas.advertiseUrl).toBe('http://gateway-a:8787');
    expect(() => parseConfig({ ...(readJson(join(ROOT, 'config/replicas/gateway.json')) as object), replicas: {} }, env, ROOT)).toThrow(
      /replicas\.secret/,
    );
  });

  it('config/approvals.example.json: server-filesystem over stdio, destructive tools approved (remembered 10 min), a tool limit, an audit file', () => {
    const cfg = parseConfig(readJson(join(ROOT, 'config/approvals.example.json')), fakeEnv, join(ROOT, 'config'));
    const files = cfg.upstreams.files!;
    expect(files).toMatchObject({ transport: 'stdio', command: 'npx', args: ['-y', '@modelcontextprotocol/server-filesystem', '/tmp'] });
    expect(files.approvals).toMatchObject({ destructive: true, rememberMs: 600_000 });
    expect(files.limits.tools.write_file).toMatchObject({ requestsPerSecond: 1, burst: 5 });
    expect(cfg.audit).toMatchObject({ enabled: true, destination: join(ROOT, 'config', 'audit.log') });
  });

  const examples = readdirSync(join(ROOT, 'config')).filter((f) => f.endsWith('.example.json'));
  it(`every config/*.example.json parses with parseConfig (${examples.length} found)`, () => {
    for (const f of examples) {
      const file = join(ROOT, 'config', f);
      expect(() => parseConfig(readJson(file), fakeEnv, join(ROOT, 'config')), f).not.toThrow();
    }
  });
});

describe('parseConfig errors', () => {
  it('a wrongly typed field is reported as a ConfigError naming its JSON path', () => {
    const raw = { upstreams: { everything: { transport: 'stdio', command: 'node', maxSessions: '8' } } };
    expect(() => parseConfig(raw, {})).toThrow(ConfigError);
    expect(() => parseConfig(raw, {})).toThrow(/upstreams\.everything\.maxSessions/);
  });

  it('a URL the gateway cannot reach (another scheme than http or https) is refused at load, naming its path; http and https pass', () => {
    for (const url of ['ftp://127.0.0.1/y', 'file:///etc/passwd', 'ws://127.0.0.1:1/mcp', 'not a url']) {
      for (const transport of ['streamable-http', 'sse']) {
        expect(() => parseConfig({ upstreams: { x: { transport, url } } }, {}), `${transport} ${url}`).toThrow(
          /upstreams\.x\.url: expected an http:\/\/ or https:\/\/ URL/,
        );
      }
      expect(() => parseConfig({ mcpServers: { x: { url } } }, {}), url).toThrow(
        /mcpServers\.x\.url: expected an http:\/\/ or https:\/\/ URL/,
      );
    }
    for (const url of ['http://127.0.0.1:3001/mcp', 'https://example.com/mcp'])
      expect(() => parseConfig({ upstreams: { x: { transport: 'streamable-http', url } } }, {})).not.toThrow();
  });

  it('an unset ${VAR} is reported naming the variable and its JSON path', () => {
    const raw = {
      requestState: { keys: [{ kid: 'k', secret: '${NOPE_NOT_SET}' }] },
      upstreams: { a: { transport: 'stdio', command: 'node' } },
    };
    expect(() => parseConfig(raw, {})).toThrow(/requestState\.keys\[0\]\.secret: environment variable NOPE_NOT_SET is not set/);
  });

  it('legacySessions: SSE polling is off by default, and closeStreamAfterMs needs stored events', () => {
    const upstreams = { a: { transport: 'stdio', command: 'node' } };
    const defaults = parseConfig({ upstreams }, {}).legacySessions;
    expect(defaults.closeStreamAfterMs).toBe(0);
    expect(defaults.retryMs).toBe(1000);
    expect(
      parseConfig({ legacySessions: { closeStreamAfterMs: 2000, retryMs: 500 }, upstreams }, {}).legacySessions.closeStreamAfterMs,
    ).toBe(2000);
    expect(() => parseConfig({ legacySessions: { closeStreamAfterMs: 2000, eventsPerSession: 0 }, upstreams }, {})).toThrow(
      /legacySessions\.closeStreamAfterMs: closeStreamAfterMs needs eventsPerSession > 0/,
    );
    expect(() => parseConfig({ legacySessions: { retryMs: 0 }, upstreams }, {})).toThrow(/legacySessions\.retryMs/);
  });

  it('admin: off by default; with apiKeys or jwt it needs its principals', () => {
    const upstreams = { a: { transport: 'stdio', command: 'node' } };
    expect(parseConfig({ upstreams }, {}).admin).toEqual({ enabled: false, refreshSeconds: 5 });
    expect(parseConfig({ admin: { enabled: true }, upstreams }, {}).admin.enabled).toBe(true);
    const auth = { mode: 'apiKeys', keys: [{ principal: 'ops', key: 'k'.repeat(20) }] };
    expect(() => parseConfig({ auth, admin: { enabled: true }, upstreams }, {})).toThrow(
      /admin\.principals: required with auth\.mode "apiKeys"/,
    );
    expect(parseConfig({ auth, admin: { enabled: true, principals: ['apikey:ops'] }, upstreams }, {}).admin.principals).toEqual([
      'apikey:ops',
    ]);
    expect(() => parseConfig({ admin: { enabled: true, principals: [] }, upstreams }, {})).toThrow(/admin\.principals/);
    expect(() => parseConfig({ admin: { enabled: true, refreshSeconds: 0 }, upstreams }, {})).toThrow(/admin\.refreshSeconds/);
    expect(() => parseConfig({ admin: { enabled: 'yes' }, upstreams }, {})).toThrow(/admin\.enabled/);
    expect(() => parseConfig({ admin: { enabled: true, page: '/ops' }, upstreams }, {})).toThrow(/admin.*page/);
  });
});
