/**
 * The README's commands, run as a reader would run them, against what the README shows.
 *
 * A fresh copy of the default `gateway.config.json` (port 0) is started the way `npm start` starts
 * it (the `start` script of package.json, from the project root). Then every ```sh block under
 * "## A tour with curl" in README.md is run, in order, in one bash process, with the README's base
 * URL replaced by the gateway's. The fenced block that follows a ```sh block (before the next one)
 * is the output the README shows for it; a ```sh block without one must print nothing. In a shown
 * output, `…` stands for any text within a line, and a line that is only `…` for any number of
 * lines. So the README and this test cannot drift apart: changing either breaks the other.
 *
 * The ```ts blocks under "## Connecting a client" (a 2026-07-28 client and a legacy one) are run the
 * way that section says to run them (`node --import tsx FILE.ts`, the file inside the checkout so
 * their imports resolve), each from a temporary file in the project, against that gateway, and
 * must print the answer their elicitation handler gave.
 */
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { interpretConfig } from '../../src/config/load.js';
import { startCliArgs, type CliGateway } from '../helpers/cli.js';
import { ROOT } from '../helpers/processes.js';
import { scaled } from '../helpers/budget.js';

const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
/** The base URL the README's commands use. */
const README_BASE = 'http://127.0.0.1:8787';

/** A fenced code block of the README: its info string, its text and its first line number. */
interface Block {
  lang: string;
  text: string;
  line: number;
}

/** The fenced code blocks of `section` (from its `## ` heading to the next one). */
function blocksOf(markdown: string, heading: string): Block[] {
  const start = markdown.indexOf(`\n## ${heading}\n`);
  if (start < 0) throw new Error(`README.md has no "## ${heading}" section`);
  const end = markdown.indexOf('\n## ', start + 1);
  const section = markdown.slice(start, end < 0 ? undefined : end);
  const firstLine = markdown.slice(0, start).split('\n').length + 1;
  const blocks: Block[] = [];
  const fence = /^```([^\n]*)\n([\s\S]*?)^```[ \t]*$/gm;
  for (let m; (m = fence.exec(section));) {
    blocks.push({ lang: m[1]!.trim(), text: m[2]!, line: firstLine + section.slice(0, m.index).split('\n').length - 1 });
  }
  return blocks;
}

/** One command block of the tour and the output the README shows for it (none: it prints nothing). */
interface Step {
  code: string;
  expected: string;
  line: number;
}

function tourSteps(markdown: string): Step[] {
  const steps: Step[] = [];
  for (const b of blocksOf(markdown, 'A tour with curl')) {
    if (b.lang === 'sh') steps.push({ code: b.text, expected: '', line: b.line });
    else if (steps.length && steps.at(-1)!.expected === '') steps.at(-1)!.expected = b.text;
  }
  return steps;
}

/** Lines without trailing spaces, without trailing empty lines. */
function normalize(text: string): string[] {
  const lines = text.split('\n').map((l) => l.replace(/\s+$/, ''));
  while (lines.length && lines.at(-1) === '') lines.pop();
  return lines;
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * True when `actual` is what `expected` shows: line for line, `…` standing for any text within a
 * line, and a line that is only `…` for any number of lines.
 */
function matchesShown(expected: string, actual: string): boolean {
  let pattern = '^';
  for (const line of normalize(expected)) {
    pattern += line === '…' ? '(?:[^\\n]*\\n)*?' : `${line.split('…').map(escape).join('[^\\n]*')}\\n`;
  }
  return new RegExp(`${pattern}$`).test(
    normalize(actual)
      .map((l) => `${l}\n`)
      .join(''),
  );
}

/** `command` is on the PATH. */
function have(command: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Runs the steps in order in one bash process; resolves with the output (stdout and stderr) of each. */
function runSteps(steps: Step[], base: string, cwd: string): Promise<string[]> {
  const marker = (i: number) => `@@readme-step-${i}@@`;
  const script = steps.map((s, i) => `${s.code.split(README_BASE).join(base)}\nprintf '\\n%s\\n' '${marker(i)}'\n`).join('');
  return new Promise((resolve, reject) => {
    const bash = spawn('bash', ['-c', `exec 2>&1\n${script}`], { cwd, stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    bash.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => {
      bash.kill('SIGKILL');
      reject(new Error(`the tour did not finish within 60 s; output so far:\n${out}`));
    }, scaled(60_000));
    bash.once('exit', () => {
      clearTimeout(timer);
      const outputs: string[] = [];
      let rest = out;
      for (let i = 0; i < steps.length; i++) {
        const at = rest.indexOf(`\n${marker(i)}\n`);
        if (at < 0) {
          outputs.push(`(step did not finish) ${rest}`);
          rest = '';
          continue;
        }
        outputs.push(rest.slice(0, at));
        rest = rest.slice(at + marker(i).length + 2);
      }
      resolve(outputs);
    });
  });
}

/**
 * How "## Connecting a client" says to run a snippet: the Node flags before the `.ts` file in its
 * `` `node … FILE.ts` `` (undefined when it says nothing of the kind).
 */
function snippetCommand(readme: string): string[] | undefined {
  const section = readme.slice(readme.indexOf('## Connecting a client'));
  const m = /`node ((?:--?[\w-]+ )*(?:[\w@/.-]+ )?)[\w.-]+\.ts`/.exec(section.slice(0, section.indexOf('```')));
  return m ? m[1]!.trim().split(/\s+/) : undefined;
}

/** Runs a TypeScript snippet as a file in the project, as the README says; resolves with its output (stdout and stderr) and exit code. */
function runSnippet(code: string, timeoutMs = 60_000): Promise<{ output: string; code: number | null }> {
  const file = join(ROOT, 'test', `.readme-snippet-${randomUUID()}.ts`);
  writeFileSync(file, code);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...(snippetCommand(README) ?? []), file], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the snippet did not finish within ${timeoutMs} ms; output so far:\n${output}`));
    }, timeoutMs);
    child.once('exit', (exitCode) => {
      clearTimeout(timer);
      rmSync(file, { force: true });
      resolve({ output, code: exitCode });
    });
  });
}

describe('matchesShown (the comparison the tour test relies on)', () => {
  it('matches literally, with … inside a line and … as whole lines', () => {
    expect(matchesShown('{"a":1}', '{"a":1}\n')).toBe(true);
    expect(matchesShown('{"a":1}', '{"a":2}')).toBe(false);
    expect(matchesShown('{"id":"…","b":2}', '{"id":"x1y2","b":2}')).toBe(true);
    expect(matchesShown('{"id":"…","b":2}', '{"id":"x1y2","b":3}')).toBe(false);
    expect(matchesShown('first\n…\nlast', 'first\nlast')).toBe(true);
    expect(matchesShown('first\n…\nlast', 'first\na\nb\nlast')).toBe(true);
    expect(matchesShown('first\n…\nlast', 'first\na\nb')).toBe(false);
    expect(matchesShown('', '')).toBe(true);
    expect(matchesShown('', 'jq: command not found')).toBe(false);
  });
});

describe('README.md', () => {
  const steps = tourSteps(README);

  it('shows the quick start commands this test and CI use', () => {
    const quick = blocksOf(README, 'Quick start')
      .filter((b) => b.lang === 'sh')
      .map((b) => b.text.trim());
    expect(quick).toEqual(['npm ci && npm start', 'npm test']);
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
    expect(pkg.scripts.start).toMatch(/^exec node /);
    expect(pkg.scripts.test).toBeTruthy();
  });

  it('has a tour: the setup, discovery, tools/list, an input_required round, a task', () => {
    const all = steps.map((s) => s.code).join('\n');
    for (const method of ['server/discover', 'tools/list', 'tools/call', 'subscriptions/listen', 'tasks/get'])
      expect(all).toContain(`Mcp-Method: ${method}`);
    expect(all).toContain(README_BASE);
    expect(steps.map((s) => s.expected).join('\n')).toContain('"resultType":"input_required"');
  });

  it('stays within 15,000 bytes', () => {
    expect(Buffer.byteLength(README)).toBeLessThanOrEqual(15_000);
  });

  it('says how to run a client snippet: a .ts file in the checkout, with node --import tsx', () => {
    expect(snippetCommand(README)).toEqual(['--import', 'tsx']);
  });

  it('shows a client snippet for each client era, a 2026-07-28 (v2 SDK) one and a legacy (v1 SDK) one', () => {
    const snippets = blocksOf(README, 'Connecting a client').filter((b) => b.lang === 'ts');
    expect(snippets.map((b) => /from '(@modelcontextprotocol\/(?:client|sdk))/.exec(b.text)?.[1])).toEqual([
      '@modelcontextprotocol/client',
      '@modelcontextprotocol/sdk',
    ]);
    expect(snippets[0]!.text).toContain("pin: '2026-07-28'");
    for (const b of snippets) expect(b.text).toContain(`${README_BASE}/mcp/everything`);
  });

  it('its mcpServers example is a valid server list, and the example configs it starts exist', () => {
    const own = blocksOf(README, 'Put your own server behind it').filter((b) => b.lang === 'sh');
    const heredoc = /<<'EOF'\n([\s\S]*?)\nEOF/.exec(own[0]!.text);
    expect(heredoc).not.toBeNull();
    const loaded = interpretConfig(JSON.parse(heredoc![1]!), {}, ROOT);
    expect(loaded.format).toBe('mcpServers');
    expect(loaded.config.upstreams.everything?.transport).toBe('stdio');
    const configs = [
      ...own
        .map((b) => b.text)
        .join('\n')
        .matchAll(/--config (config\/\S+\.json)/g),
    ].map((m) => m[1]!);
    expect(configs).toEqual(['config/stdio.example.json', 'config/streamable-http.example.json', 'config/sse.example.json']);
    for (const c of configs) expect(existsSync(join(ROOT, c)), c).toBe(true);
    for (const b of own)
      for (const m of b.text.matchAll(/node (node_modules\/\S+)/g)) expect(existsSync(join(ROOT, m[1]!)), m[1]).toBe(true);
  });

  describe('the curl tour, run against the default gateway.config.json', () => {
    let dir: string;
    let gw: CliGateway | undefined;
    let outputs: string[] = [];

    beforeAll(async () => {
      if (!have('curl') || !have('jq')) throw new Error('the README tour needs curl and jq on the PATH (.ci/run installs them)');
      dir = mkdtempSync(join(tmpdir(), 'mrtr-readme-'));
      const file = join(dir, 'gateway.config.json');
      copyFileSync(join(ROOT, 'gateway.config.json'), file);
      const cfg = JSON.parse(readFileSync(file, 'utf8'));
      expect(cfg.listen.port).toBe(8787);
      cfg.listen.port = 0;
      writeFileSync(file, JSON.stringify(cfg, null, 2));
      // As `npm start` runs it: the start script's command, from the project root.
      const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
      const [node, ...entry] = (pkg.scripts.start as string).replace(/^exec\s+/, '').split(/\s+/);
      expect(node).toBe('node');
      gw = await startCliArgs(['--config', file], { entry, cwd: ROOT });
      outputs = await runSteps(steps, gw.base, dir);
    }, scaled(90_000));

    afterAll(async () => {
      if (gw) {
        gw.child.kill('SIGTERM');
        await gw.exited;
      }
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('listens where the README says, on the port of the copy', () => {
      expect(gw!.logs.find((l) => /listening/.test(l.msg))?.endpoints).toEqual([`POST ${gw!.base}/mcp/everything`]);
    });

    it.each(
      blocksOf(README, 'Connecting a client')
        .filter((b) => b.lang === 'ts')
        .map((b) => [b.line, b.text] as const),
    )(
      'the client snippet at README.md:%i completes its eliciting call against the gateway and prints the answer',
      async (_line, code) => {
        const { output, code: exitCode } = await runSnippet(code.split(README_BASE).join(gw!.base));
        expect(exitCode, output).toBe(0);
        expect(output).toContain('Name: Ada Lovelace');
      },
      90_000,
    );

    it.each(steps.map((s, i) => [s.line, i] as const))('the block at README.md:%i prints what the README shows', (_line, i) => {
      const step = steps[i]!;
      const shown = step.expected === '' ? '(nothing)' : step.expected;
      expect(
        matchesShown(step.expected, outputs[i] ?? ''),
        `README.md:${step.line} shows\n${shown}\nbut the command printed\n${outputs[i]}`,
      ).toBe(true);
    });
  });
});
