/**
 * Which stdio commands install what they run on first use, and the start budget an upstream gets
 * until one of its starts succeeded (`timeouts.firstStartMs`).
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { startTimeoutMessage } from '../../src/upstream/start-errors.js';
import { DEFAULT_FIRST_START_MS, FirstStart, installsOnFirstRun } from '../../src/upstream/stdio-child.js';

describe('installsOnFirstRun', () => {
  it('knows the package runners that install on first use, by file name, with their subcommand', () => {
    for (const [command, args] of [
      ['npx', ['-y', '@modelcontextprotocol/server-github']],
      ['/usr/local/bin/npx', ['pkg']],
      ['npx.cmd', ['-y', 'pkg']],
      ['uvx', ['mcp-server-fetch']],
      ['bunx', ['pkg']],
      ['pnpx', ['pkg']],
      ['pnpm', ['dlx', 'pkg']],
      ['yarn', ['dlx', 'pkg']],
      ['bun', ['x', 'pkg']],
      ['npm', ['exec', '--yes', 'pkg']],
      ['npm', ['--yes', 'x', 'pkg']],
      ['pipx', ['run', 'pkg']],
      ['uv', ['tool', 'run', 'pkg']],
    ] as const) {
      expect(installsOnFirstRun(command, args), `${command} ${args.join(' ')}`).toBe(true);
    }
    for (const [command, args] of [
      ['node', ['server.js']],
      ['pnpm', ['start']],
      ['npm', ['run', 'serve']],
      ['uv', ['run', 'server.py']],
      ['python3', ['-m', 'server']],
      ['yarn', []],
    ] as const) {
      expect(installsOnFirstRun(command, args), `${command} ${args.join(' ')}`).toBe(false);
    }
  });
});

describe('installsOnFirstRun behind a shell', () => {
  it('knows an installer that is the first command of a shell script (after exec, env assignments) or of env', () => {
    for (const [command, args] of [
      ['sh', ['-c', 'exec npx -y @modelcontextprotocol/server-github']],
      ['/bin/bash', ['-lc', 'npx -y pkg']],
      ['bash', ['-c', 'FOO=1 exec uvx mcp-server-fetch; echo done']],
      ['zsh', ['-c', '"pnpm" dlx pkg']],
      ['cmd', ['/c', 'npx', '-y', 'pkg']],
      ['C:\\Windows\\System32\\cmd.exe', ['/s', '/c', 'npx.cmd -y pkg']],
      ['powershell', ['-NoProfile', '-Command', 'npx -y pkg']],
      ['pwsh.exe', ['-c', '& npx -y pkg']],
      ['env', ['FOO=1', 'npx', '-y', 'pkg']],
      ['/usr/bin/env', ['-i', 'PATH=/usr/bin', 'uvx', 'mcp-server-fetch']],
    ] as const) {
      expect(installsOnFirstRun(command, args), `${command} ${args.join(' ')}`).toBe(true);
    }
    for (const [command, args] of [
      ['sh', ['-c', 'exec node server.js']],
      ['sh', ['-c', 'cd /srv && npx -y pkg']],
      ['sh', ['script.sh']],
      ['bash', ['-c', 'npm run serve']],
      ['cmd', ['/c', 'node', 'server.js']],
      ['powershell', ['-File', 'npx.ps1']],
      ['sh', ['-c']],
      ['env', ['FOO=1', 'node', 'server.js']],
      ['env', ['FOO=1']],
    ] as const) {
      expect(installsOnFirstRun(command, args), `${command} ${args.join(' ')}`).toBe(false);
    }
  });
});

describe('FirstStart', () => {
  const upstream = (u: Record<string, unknown>) => parseConfig({ upstreams: { u: { transport: 'stdio', ...u } } }, {}).upstreams.u!;

  it('an installing command gets firstStartMs (default 3 min) until a start succeeded, then connectMs', () => {
    const f = new FirstStart(upstream({ command: 'npx', args: ['-y', 'pkg'], timeouts: { connectMs: 2000 } }));
    expect(f.active).toBe(true);
    expect(f.budgetMs()).toBe(DEFAULT_FIRST_START_MS);
    expect(f.setting()).toBe('timeouts.firstStartMs');
    f.done();
    expect(f.active).toBe(false);
    expect(f.budgetMs()).toBe(2000);
    expect(f.setting()).toBe('timeouts.connectMs');
  });

  it('another command gets connectMs, unless firstStartMs is set: then firstStartMs, in place of connectMs', () => {
    expect(new FirstStart(upstream({ command: 'node', args: ['s.js'] })).active).toBe(false);
    expect(new FirstStart(upstream({ command: 'node', args: ['s.js'] })).budgetMs()).toBe(15_000);
    expect(new FirstStart(upstream({ command: 'node', timeouts: { firstStartMs: 60_000 } })).budgetMs()).toBe(60_000);
    expect(new FirstStart(upstream({ command: 'npx', timeouts: { firstStartMs: 1000, connectMs: 5000 } })).budgetMs()).toBe(1000);
  });

  it('firstStartMs shorter than the default connectMs is the first start budget that messages name', () => {
    const f = new FirstStart(upstream({ command: 'npx', args: ['-y', 'pkg'], timeouts: { firstStartMs: 8000 } }));
    expect(f.budgetMs()).toBe(8000);
    expect(startTimeoutMessage('u', f.budgetMs(), 'silent', 'initialize', f.setting())).toContain('timeouts.firstStartMs=8000 ms');
    f.done();
    expect(f.budgetMs()).toBe(15_000);
  });
});
