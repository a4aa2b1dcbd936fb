/**
 * The documentation's own structure: every page under docs/ opens with a table of contents that
 * links every section (`##` heading) of the page, and every relative link in README.md and
 * docs/*.md points to a file that exists and, with a `#fragment`, to a heading of that page
 * (anchors as GitHub makes them from headings).
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/processes.js';

const DOCS = join(ROOT, 'docs');
const PAGES = readdirSync(DOCS)
  .filter((f) => f.endsWith('.md'))
  .sort()
  .map((f) => join(DOCS, f));
const LINKED = [join(ROOT, 'README.md'), ...PAGES];

/** The page's lines outside fenced code blocks, with their line numbers (from 1). */
function proseLines(text: string): { line: number; text: string }[] {
  const out: { line: number; text: string }[] = [];
  let fence: string | undefined;
  text.split('\n').forEach((l, i) => {
    const m = /^\s*(`{3,}|~{3,})/.exec(l);
    if (m) {
      if (!fence) fence = m[1]![0]!.repeat(m[1]!.length);
      else if (l.trim().startsWith(fence)) fence = undefined;
      return;
    }
    if (!fence) out.push({ line: i + 1, text: l });
  });
  return out;
}

/** A heading's text as GitHub renders it: code spans, links and emphasis reduced to their text. */
function headingText(raw: string): string {
  return raw
    .replace(/`([^`]*)`/g, '$1')
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/<[^>]+>/g, '')
    .replace(/(\*\*|__|\*)(.+?)\1/g, '$2')
    .trim();
}

/** GitHub's anchor for a heading (github-slugger): lower case, punctuation dropped, spaces to hyphens. */
function slug(text: string): string {
  return text
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '')
    .replace(/ /g, '-');
}

interface Heading {
  level: number;
  text: string;
  anchor: string;
}

/** The headings of a page with their anchors, repeated ones numbered (`-1`, `-2`) as GitHub does. */
function headings(file: string): Heading[] {
  const seen = new Map<string, number>();
  const out: Heading[] = [];
  for (const { text } of proseLines(readFileSync(file, 'utf8'))) {
    const m = /^(#{1,6})\s+(.*?)\s*#*\s*$/.exec(text);
    if (!m) continue;
    const base = slug(headingText(m[2]!));
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.push({ level: m[1]!.length, text: headingText(m[2]!), anchor: n ? `${base}-${n}` : base });
  }
  return out;
}

interface Link {
  file: string;
  line: number;
  target: string;
}

/** The Markdown links (inline and reference definitions) of a page, outside code. */
function links(file: string): Link[] {
  const out: Link[] = [];
  for (const { line, text } of proseLines(readFileSync(file, 'utf8'))) {
    const prose = text.replace(/`[^`]*`/g, '');
    for (const m of prose.matchAll(/!?\[(?:[^\]]|\][^(])*?\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g))
      out.push({ file, line, target: m[1]! });
    const def = /^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$/.exec(prose);
    if (def) out.push({ file, line, target: def[1]! });
  }
  return out;
}

const external = (target: string) => /^[a-z][a-z0-9+.-]*:/i.test(target);

/** What is wrong with a relative link, or undefined when it is good. */
function brokenReason(link: Link): string | undefined {
  const [path, fragment] = link.target.split('#', 2) as [string, string | undefined];
  const file = path === '' ? link.file : resolve(dirname(link.file), decodeURIComponent(path));
  if (!existsSync(file)) return `no file ${relative(ROOT, file)}`;
  if (fragment === undefined || fragment === '') return undefined;
  if (!file.endsWith('.md') || statSync(file).isDirectory()) return undefined;
  const anchors = headings(file).map((h) => h.anchor);
  return anchors.includes(decodeURIComponent(fragment).toLowerCase()) ? undefined : `no heading #${fragment} in ${relative(ROOT, file)}`;
}

describe('the slugger', () => {
  it('makes the anchors GitHub makes', () => {
    expect(slug(headingText('`npm start`, `npx mrtr-gateway` and `dist/`'))).toBe('npm-start-npx-mrtr-gateway-and-dist');
    expect(slug(headingText('Sealing (`src/security/seal.ts`)'))).toBe('sealing-srcsecuritysealts');
    expect(slug(headingText("The child's environment"))).toBe('the-childs-environment');
    expect(slug(headingText('What leaves the gateway, and to whom'))).toBe('what-leaves-the-gateway-and-to-whom');
    expect(slug(headingText('Export, sampling, shutdown'))).toBe('export-sampling-shutdown');
    expect(slug(headingText('`auth.mode` — none'))).toBe('authmode--none');
  });
});

describe('docs pages', () => {
  it.each(PAGES.map((p) => [relative(ROOT, p), p]))(
    '%s has a table of contents before its first section, linking every section',
    (_name, page) => {
      const lines = proseLines(readFileSync(page, 'utf8'));
      const firstSection = lines.find((l) => /^##\s/.test(l.text) && !/^##\s+Contents\s*$/.test(l.text));
      expect(firstSection, 'a page with sections').toBeDefined();
      const marker = lines.findIndex((l) => /^Contents:/.test(l.text) || /^##\s+Contents\s*$/.test(l.text));
      expect(marker, 'a "Contents:" line or a "## Contents" heading').toBeGreaterThanOrEqual(0);
      expect(lines[marker]!.line).toBeLessThan(firstSection!.line);
      // The contents: from the marker to the next blank line after the links, or the first section.
      const block: string[] = [];
      for (const l of lines.slice(marker)) {
        if (l.line >= firstSection!.line) break;
        if (block.length && l.text.trim() === '' && block.some((b) => b.includes('](#'))) break;
        block.push(l.text);
      }
      const listed = [...block.join('\n').matchAll(/\]\(#([^)]+)\)/g)].map((m) => m[1]!);
      const sections = headings(page).filter((h) => h.level === 2 && h.text !== 'Contents');
      expect(sections.length).toBeGreaterThan(0);
      expect(
        sections.map((h) => h.anchor).filter((a) => !listed.includes(a)),
        'sections missing from the contents',
      ).toEqual([]);
      const anchors = headings(page).map((h) => h.anchor);
      expect(
        listed.filter((a) => !anchors.includes(a)),
        'contents entries with no heading',
      ).toEqual([]);
    },
  );
});

describe('relative links', () => {
  const all = LINKED.flatMap(links).filter((l) => !external(l.target));

  it('are found (the check reads the links it should)', () => {
    expect(all.length).toBeGreaterThan(100);
    expect(all.some((l) => l.file.endsWith('README.md'))).toBe(true);
    expect(brokenReason({ file: join(DOCS, 'tracing.md'), line: 0, target: '#no-such-heading' })).toBe(
      'no heading #no-such-heading in docs/tracing.md',
    );
    expect(brokenReason({ file: join(DOCS, 'tracing.md'), line: 0, target: 'nope.md' })).toBe('no file docs/nope.md');
    expect(brokenReason({ file: join(DOCS, 'tracing.md'), line: 0, target: 'sampling.md#temperature-and-anthropic' })).toBeUndefined();
  });

  it.each(LINKED.map((p) => [relative(ROOT, p), p]))('in %s point to existing files and headings', (_name, file) => {
    const broken = all
      .filter((l) => l.file === file)
      .flatMap((l) => {
        const why = brokenReason(l);
        return why ? [`${relative(ROOT, l.file)}:${l.line}: (${l.target}) ${why}`] : [];
      });
    expect(broken).toEqual([]);
  });
});

describe('the size of the docs', () => {
  // Docs are read, not searched: the design note stays a note, and the pages together stay a read.
  const size = (p: string) => statSync(p).size;
  it('docs/ is at most 150,000 bytes in total and docs/architecture.md at most 25,000', () => {
    const total = PAGES.reduce((n, p) => n + size(p), 0);
    expect(total).toBeLessThanOrEqual(150_000);
    expect(size(join(DOCS, 'architecture.md'))).toBeLessThanOrEqual(25_000);
  });

  it('bench/README.md is at most 10,000 bytes (the method and the latest results; history is in git)', () => {
    expect(size(join(ROOT, 'bench', 'README.md'))).toBeLessThanOrEqual(10_000);
  });
});

describe('paths named in the docs and the file headers', () => {
  // A page or a header that names a moved or deleted file sends the reader nowhere.
  const named = (text: string) => [...text.matchAll(/\bsrc\/[A-Za-z0-9_./-]+/g)].map((m) => m[0].replace(/[.,)]+$/, ''));
  const sourceFiles = (dir: string): string[] =>
    readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? sourceFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
    );
  it('every src/… path in README.md, docs/, bench/README.md and src/ exists', () => {
    const files = [...LINKED, join(ROOT, 'bench', 'README.md'), ...sourceFiles(join(ROOT, 'src'))];
    const missing = files.flatMap((f) =>
      named(readFileSync(f, 'utf8'))
        .filter((p) => !existsSync(join(ROOT, p)))
        .map((p) => `${relative(ROOT, f)}: ${p}`),
    );
    expect(missing).toEqual([]);
    expect(named('see src/http/app.ts, and src/router/.')).toEqual(['src/http/app.ts', 'src/router/']);
  });
});
