/**
 * Config loading: `mcpServers` files (transport inference, skipped and ignored keys, names,
 * substitution), telling them from gateway configs, and the stdio child environment
 * (`envPassthrough`).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { matchesPassthrough, passthroughEnv } from '../../src/config/child-env.js';
import { ConfigError, interpretConfig, parseConfig, readConfigFile } from '../../src/config/load.js';
import { suggestUpstreamName } from '../../src/config/mcp-servers.js';

describe('mcpServers files', () => {
  it('infers the transport: command → stdio; url with type sse or a path ending in /sse → sse; any other url → streamable-http', () => {
    const cfg = parseConfig(
      {
        mcpServers: {
          a: { command: 'node', args: ['server.js'], env: { X: '1' }, cwd: 'srv' },
          b: { url: 'http://127.0.0.1:3001/mcp' },
          c: { url: 'http://127.0.0.1:3001/sse' },
          d: { url: 'http://127.0.0.1:3001/events', type: 'sse' },
          e: { url: 'http://127.0.0.1:3001/sse', type: 'http' },
          f: { url: 'http://127.0.0.1:3001/mcp', type: 'streamable-http', headers: { Authorization: 'Bearer t' } },
          g: { command: 'node', type: 'stdio' },
        },
      },
      {},
      '/base',
    );
    const u = cfg.upstreams;
    expect(u.a).toMatchObject({
      transport: 'stdio',
      command: 'node',
      args: ['server.js'],
      env: { X: '1' },
      cwd: '/base/srv',
      envPassthrough: [],
      maxSessions: 16,
    });
    expect(u.b).toMatchObject({ transport: 'streamable-http', url: 'http://127.0.0.1:3001/mcp', headers: {} });
    expect(u.c!.transport).toBe('sse');
    expect(u.d!.transport).toBe('sse');
    expect(u.e!.transport).toBe('streamable-http');
    expect(u.f).toMatchObject({ transport: 'streamable-http', headers: { Authorization: 'Bearer t' } });
    expect(u.g!.transport).toBe('stdio');
    // Everything else takes the gateway's defaults.
    expect(cfg.listen).toEqual({ host: '127.0.0.1', port: 8787 });
    expect(cfg.auth.mode).toBe('none');
  });

  it('skips disabled servers without substituting them, and reports ignored keys per server', () => {
    const loaded = interpretConfig(
      {
        $schema: 'x',
        globalShortcut: 'Ctrl+Space',
        mcpServers: {
          on: { command: 'node', disabled: false, autoApprove: ['x'], alwaysAllow: [], timeout: 60, description: 'd' },
          off: { command: 'node', env: { T: '${UNSET_BY_TEST}' }, disabled: true },
        },
      },
      {},
    );
    expect(loaded.format).toBe('mcpServers');
    expect(Object.keys(loaded.config.upstreams)).toEqual(['on']);
    expect(loaded.disabled).toEqual(['off']);
    expect(loaded.warnings).toEqual([
      { path: '(root)', ignored: ['globalShortcut'] },
      { path: 'mcpServers.on', ignored: ['autoApprove', 'alwaysAllow', 'timeout', 'description'] },
    ]);
  });

  it('substitutes ${NAME} in the keys it uses, reporting an unset variable at its place in the file', () => {
    const cfg = parseConfig(
      { mcpServers: { gh: { command: 'npx', env: { GITHUB_TOKEN: '${GH}' } }, r: { url: 'https://${HOST_X}/mcp' } } },
      { GH: 'tok', HOST_X: 'example.com' },
    );
    expect(cfg.upstreams.gh).toMatchObject({ env: { GITHUB_TOKEN: 'tok' } });
    expect(cfg.upstreams.r).toMatchObject({ url: 'https://example.com/mcp' });
    expect(() => parseConfig({ mcpServers: { gh: { command: 'npx', env: { GITHUB_TOKEN: '${GH}' } } } }, {})).toThrow(
      /mcpServers\.gh\.env\.GITHUB_TOKEN: environment variable GH is not set/,
    );
  });

  it('a name that is not a valid upstream name is an error naming the server, with a suggestion', () => {
    expect(() => parseConfig({ mcpServers: { 'my server': { command: 'node' } } }, {})).toThrow(
      /mcpServers\["my server"\]: "my server" cannot be an upstream name.*"my-server"/,
    );
    expect(() => parseConfig({ mcpServers: { '@org/tool': { url: 'http://127.0.0.1/mcp' } } }, {})).toThrow(/for example to "org-tool"/);
    expect(suggestUpstreamName('-_-')).toBe('');
  });

  it('problems are reported at their place in the file, all at once', () => {
    let message = '';
    try {
      parseConfig(
        {
          mcpServers: {
            both: { command: 'node', url: 'http://x/mcp' },
            neither: { args: [] },
            badType: { url: 'http://127.0.0.1/mcp', type: 'websocket' },
            stdioType: { command: 'node', type: 'sse' },
            notObject: 'node server.js',
            badDisabled: { command: 'node', disabled: 'yes' },
          },
        },
        {},
      );
    } catch (e) {
      expect(e).toBeInstanceOf(ConfigError);
      message = (e as Error).message;
    }
    expect(message).toContain('mcpServers.both: give "command" (a stdio server) or "url" (an HTTP server), not both');
    expect(message).toContain('mcpServers.neither: needs "command"');
    expect(message).toContain('mcpServers.badType.type: expected "http", "streamable-http", "streamableHttp" or "sse"');
    expect(message).toContain('mcpServers.stdioType.type:');
    expect(message).toContain('mcpServers.notObject: expected an object');
    expect(message).toContain('mcpServers.badDisabled.disabled: expected true or false');
  });

  it('a server that cannot be converted and one the schema refuses are both reported, one line each', () => {
    const problems = (raw: unknown) => {
      try {
        parseConfig(raw, {});
      } catch (e) {
        expect(e).toBeInstanceOf(ConfigError);
        return (e as Error).message.split('\n').slice(1);
      }
      return [];
    };
    expect(problems({ mcpServers: { a: { url: 'http://127.0.0.1/mcp', type: 'bad' }, b: { command: 'node', env: { A: 1 } } } })).toEqual([
      '  mcpServers.a.type: expected "http", "streamable-http", "streamableHttp" or "sse" for a server with "url", got "bad"',
      '  mcpServers.b.env.A: Invalid input: expected string, received number',
    ]);
    // No server left is no problem of its own beside the servers' problems.
    expect(problems({ mcpServers: { 'a b': { command: 'x' }, c: {} } })).toEqual([
      expect.stringMatching(/^  mcpServers\["a b"\]: /),
      '  mcpServers.c: needs "command" (a stdio server) or "url" (an HTTP server)',
    ]);
  });

  it('an invalid upstream name in a gateway config says which characters are allowed, with a suggestion', () => {
    expect(() => parseConfig({ upstreams: { 'a/b c': { transport: 'stdio', command: 'node' } } }, {})).toThrow(
      'upstreams["a/b c"]: "a/b c" cannot be an upstream name (it becomes the path /mcp/NAME): use letters, digits, ".", "_" and "-", starting with a letter or digit; rename the upstream, for example to "a-b-c"',
    );
  });

  it('logLevel is accepted in any case', () => {
    expect(parseConfig({ logLevel: 'DEBUG', upstreams: { a: { transport: 'stdio', command: 'node' } } }, {}).logLevel).toBe('debug');
    expect(() => parseConfig({ logLevel: 'LOUD', upstreams: { a: { transport: 'stdio', command: 'node' } } }, {})).toThrow(/logLevel/);
  });

  it('schema problems of a converted server name the mcpServers path', () => {
    expect(() => parseConfig({ mcpServers: { s: { command: 'node', headers: { a: 'b' } } } }, {})).toThrow(
      /mcpServers\.s: Unrecognized key: "headers"/,
    );
    expect(() => parseConfig({ mcpServers: { s: { url: 'not a url' } } }, {})).toThrow(/mcpServers\.s\.url:/);
    expect(() => parseConfig({ mcpServers: { s: { command: 'node', args: 'x' } } }, {})).toThrow(/mcpServers\.s\.args:/);
  });

  it('a server\'s "mrtr-gateway" key carries the gateway\'s settings for its upstream, substituted, not warned about', () => {
    const loaded = interpretConfig(
      {
        mcpServers: {
          gh: {
            command: 'npx',
            args: ['-y', 'server-github'],
            'mrtr-gateway': {
              timeouts: { connectMs: 2000, firstStartMs: 60_000 },
              protocol: 'legacy',
              tools: { deny: ['delete_*'] },
              roots: [{ uri: 'file://${ROOT_DIR}' }],
              envPassthrough: ['GH_*'],
            },
          },
          r: { url: 'http://127.0.0.1:3001/mcp', 'mrtr-gateway': { forwardAuthorization: true } },
        },
      },
      { ROOT_DIR: '/srv' },
    );
    expect(loaded.warnings).toEqual([]);
    const gh = loaded.config.upstreams.gh!;
    expect(gh).toMatchObject({
      transport: 'stdio',
      command: 'npx',
      protocol: 'legacy',
      tools: { deny: ['delete_*'] },
      roots: [{ uri: 'file:///srv' }],
      envPassthrough: ['GH_*'],
    });
    expect(gh.timeouts).toMatchObject({ connectMs: 2000, firstStartMs: 60_000, requestMs: 60_000 });
    expect(loaded.config.upstreams.r).toMatchObject({ transport: 'streamable-http', forwardAuthorization: true });
  });

  it('problems in "mrtr-gateway" name mcpServers.NAME["mrtr-gateway"]…; server keys there are refused', () => {
    const problems = (raw: unknown) => {
      try {
        parseConfig(raw, {});
      } catch (e) {
        return (e as ConfigError).message.split('\n').slice(1);
      }
      return [];
    };
    expect(problems({ mcpServers: { s: { command: 'node', 'mrtr-gateway': { timeouts: { connectMs: -1 } } } } })).toEqual([
      expect.stringMatching(/^  mcpServers\.s\["mrtr-gateway"\]\.timeouts\.connectMs: /),
    ]);
    expect(problems({ mcpServers: { s: { command: 'node', 'mrtr-gateway': { timeout: 5 } } } })).toEqual([
      '  mcpServers.s["mrtr-gateway"]: Unrecognized key: "timeout"',
    ]);
    expect(problems({ mcpServers: { s: { command: 'node', 'mrtr-gateway': { protocol: 'v2' } } } })).toEqual([
      expect.stringMatching(/^  mcpServers\.s\["mrtr-gateway"\]\.protocol: /),
    ]);
    expect(problems({ mcpServers: { s: { command: 'node', 'mrtr-gateway': 'fast' } } })).toEqual([
      '  mcpServers.s["mrtr-gateway"]: expected an object of the gateway\'s settings for this upstream (timeouts, protocol, roots, tools, …)',
    ]);
    expect(problems({ mcpServers: { s: { command: 'node', 'mrtr-gateway': { command: 'other', transport: 'sse' } } } })).toEqual([
      '  mcpServers.s["mrtr-gateway"].command: "command" belongs to the server itself (once), not under "mrtr-gateway"',
      '  mcpServers.s["mrtr-gateway"].transport: "transport" belongs to the server itself (once), not under "mrtr-gateway"',
    ]);
    expect(problems({ mcpServers: { s: { command: 'node', 'mrtr-gateway': { roots: [{ uri: '${NOPE_UNSET}' }] } } } })).toEqual([
      '  mcpServers.s["mrtr-gateway"].roots[0].uri: environment variable NOPE_UNSET is not set',
    ]);
    // A key of the server itself that its transport does not take is still reported at the server.
    expect(problems({ mcpServers: { s: { command: 'node', headers: { a: 'b' }, 'mrtr-gateway': { required: true } } } })).toEqual([
      '  mcpServers.s: Unrecognized key: "headers"',
    ]);
  });

  it('an mcpServers file whose servers are all disabled, or empty, is an error', () => {
    expect(() => parseConfig({ mcpServers: { a: { command: 'node', disabled: true } } }, {})).toThrow(/every server is disabled \(a\)/);
    expect(() => parseConfig({ mcpServers: {} }, {})).toThrow(/mcpServers: no servers/);
    expect(() => parseConfig({ mcpServers: [] }, {})).toThrow(/mcpServers: expected an object/);
  });
});

describe("VS Code's .vscode/mcp.json and ${NAME:-default}", () => {
  it('"servers" is read as "mcpServers": type stdio, http (Streamable HTTP) and sse; problems name servers.NAME; inputs are ignored with a note', () => {
    const loaded = interpretConfig(
      {
        inputs: [{ type: 'promptString', id: 'unused', description: 'Not referenced' }],
        servers: {
          local: { type: 'stdio', command: 'node', args: ['server.js'], env: { X: '1' } },
          remote: { type: 'http', url: 'http://127.0.0.1:3001/mcp', headers: { 'X-Team': 'a' } },
          old: { type: 'sse', url: 'http://127.0.0.1:3001/events' },
        },
      },
      {},
      '/base',
    );
    expect(loaded.format).toBe('mcpServers');
    expect(loaded.config.upstreams.local).toMatchObject({ transport: 'stdio', command: 'node', args: ['server.js'], env: { X: '1' } });
    expect(loaded.config.upstreams.remote).toMatchObject({ transport: 'streamable-http', headers: { 'X-Team': 'a' } });
    expect(loaded.config.upstreams.old!.transport).toBe('sse');
    expect(loaded.warnings).toEqual([{ path: '(root)', ignored: ['inputs'] }]);
    expect(() => parseConfig({ servers: { r: { type: 'http', url: 'ftp://x' } } }, {})).toThrow(/\n {2}servers\.r\.url: expected an http/);
    expect(() => parseConfig({ servers: { a: { command: 'node' } }, mcpServers: { b: { command: 'node' } } }, {})).toThrow(
      /both "mcpServers" and "servers"/,
    );
  });

  it('${input:ID} is refused at its place, saying to use an environment variable', () => {
    const servers = { servers: { gh: { command: 'npx', env: { GITHUB_TOKEN: '${input:github-token}' } } } };
    expect(() => parseConfig(servers, {})).toThrow(
      /servers\.gh\.env\.GITHUB_TOKEN: \$\{input:github-token\} is a VS Code input the gateway cannot ask for: use \$\{NAME\} of an environment variable/,
    );
  });

  it('${NAME:-default} gives the default when NAME is unset or empty, else NAME', () => {
    const servers = { mcpServers: { r: { url: '${MRTR_URL:-http://127.0.0.1:3001/mcp}', headers: { X: 'a${MRTR_EMPTY:-b}c' } } } };
    expect(parseConfig(servers, { MRTR_EMPTY: '' }).upstreams.r).toMatchObject({ url: 'http://127.0.0.1:3001/mcp', headers: { X: 'abc' } });
    expect(parseConfig(servers, { MRTR_URL: 'https://example.com/mcp', MRTR_EMPTY: 'z' }).upstreams.r).toMatchObject({
      url: 'https://example.com/mcp',
      headers: { X: 'azc' },
    });
    const gateway = { upstreams: { a: { transport: 'stdio', command: '${MRTR_CMD:-node}' } } };
    expect(parseConfig(gateway, {}).upstreams.a).toMatchObject({ command: 'node' });
  });
  it('a file with comments (JSONC, as .vscode/mcp.json allows) is not valid JSON, and the message says comments are not allowed', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'mrtr-jsonc-')), 'mcp.json');
    writeFileSync(file, '{\n  // my servers\n  "servers": {}\n}\n');
    expect(() => readConfigFile(file, {})).toThrow(/not valid JSON \(.+\); comments are not allowed$/);
  });
});

describe('telling the formats apart', () => {
  it('a file with both upstreams and mcpServers is an error', () => {
    expect(() =>
      parseConfig({ upstreams: { a: { transport: 'stdio', command: 'node' } }, mcpServers: { b: { command: 'node' } } }, {}),
    ).toThrow(/both "upstreams" and "mcpServers"/);
  });

  it('a file with neither is an error', () => {
    expect(() => parseConfig({ listen: { port: 1 } }, {})).toThrow(/neither "upstreams" \(a gateway config\) nor "mcpServers"/);
    expect(() => parseConfig([], {})).toThrow(/expected a JSON object/);
  });

  it('gateway settings beside mcpServers are an error, not silently dropped', () => {
    expect(() => parseConfig({ mcpServers: { a: { command: 'node' } }, auth: { mode: 'none' }, listen: {} }, {})).toThrow(
      /"auth", "listen" beside "mcpServers"/,
    );
  });

  it('a gateway config still loads as before', () => {
    const loaded = interpretConfig({ upstreams: { a: { transport: 'stdio', command: 'node' } } }, {});
    expect(loaded.format).toBe('gateway');
    expect(loaded.warnings).toEqual([]);
  });
});

describe('stdio child environment', () => {
  it('matches names exactly and prefixes with a trailing *', () => {
    expect(matchesPassthrough('AWS_REGION', 'AWS_*')).toBe(true);
    expect(matchesPassthrough('AWS', 'AWS_*')).toBe(false);
    expect(matchesPassthrough('GITHUB_TOKEN', 'GITHUB_TOKEN')).toBe(true);
    expect(matchesPassthrough('GITHUB_TOKEN_2', 'GITHUB_TOKEN')).toBe(false);
    expect(passthroughEnv(['A_*', 'B', 'C'], { A_1: '1', A_2: '2', B: 'b', D: 'd' })).toEqual({
      values: { A_1: '1', A_2: '2', B: 'b' },
      unmatched: ['C'],
    });
  });

  it('envPassthrough adds the variables of the environment to env; the configured env wins; the report lists names only', () => {
    const loaded = interpretConfig(
      {
        upstreams: {
          s: {
            transport: 'stdio',
            command: 'node',
            envPassthrough: ['GITHUB_TOKEN', 'AWS_*', 'MISSING'],
            env: { AWS_REGION: 'configured', EXTRA: 'x' },
          },
        },
      },
      { GITHUB_TOKEN: 'gh', AWS_REGION: 'from-env', AWS_PROFILE: 'p', OTHER_SECRET: 's' },
    );
    const s = loaded.config.upstreams.s!;
    expect(s.transport === 'stdio' && s.env).toEqual({ GITHUB_TOKEN: 'gh', AWS_REGION: 'configured', AWS_PROFILE: 'p', EXTRA: 'x' });
    expect(loaded.childEnv).toEqual([
      {
        upstream: 's',
        names: ['AWS_PROFILE', 'AWS_REGION', 'EXTRA', 'GITHUB_TOKEN'],
        passedThrough: ['AWS_PROFILE', 'GITHUB_TOKEN'],
        unmatched: ['MISSING'],
      },
    ]);
  });

  it('envPassthrough in an mcpServers entry works the same way', () => {
    const cfg = parseConfig({ mcpServers: { s: { command: 'node', envPassthrough: ['TOKEN_*'] } } }, { TOKEN_A: 'a', OTHER: 'o' });
    expect(cfg.upstreams.s).toMatchObject({ env: { TOKEN_A: 'a' } });
  });

  it('a bare * or a malformed entry is a config error', () => {
    expect(() => parseConfig({ upstreams: { s: { transport: 'stdio', command: 'node', envPassthrough: ['*'] } } }, {})).toThrow(
      /upstreams\.s\.envPassthrough\[0\]: give a variable name/,
    );
    expect(() => parseConfig({ upstreams: { s: { transport: 'stdio', command: 'node', envPassthrough: ['A*B'] } } }, {})).toThrow(
      /envPassthrough\[0\]/,
    );
  });
});
