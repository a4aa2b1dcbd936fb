/**
 * The pure parts of federation and of the tool policy: globs, prefixes and their readings, the
 * federated cursor, URI templates and the URI memory, merged capabilities and subscriptions, and
 * the config rules that name both upstreams of a conflict.
 */
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../../src/config/load.js';
import { unionCapabilities } from '../../src/federation/merge.js';
import { MergedSubscription, mergeHonored } from '../../src/federation/listen.js';
import { decodeCursor, encodeCursor, Naming } from '../../src/federation/naming.js';
import { federationMembers } from '../../src/config/federation-members.js';
import { globToRegExp, toolAllowed } from '../../src/config/globs.js';
import { GatewayError } from '../../src/protocol/errors.js';
import { templateSpecificity, templateToRegExp, UriIndex } from '../../src/federation/resources.js';
import type { ListenFilter, ListenHandle, SubscriptionSink } from '../../src/router/subscriptions.js';
import { servedToolList, toolCallRefusal, toolNameProblem } from '../../src/upstream/tool-policy.js';

describe('tool policy', () => {
  it('globs: * any run, ? one character, everything else literal, whole name, case-sensitive', () => {
    expect(globToRegExp('get_*').test('get_user')).toBe(true);
    expect(globToRegExp('get_*').test('get_')).toBe(true);
    expect(globToRegExp('get_*').test('xget_user')).toBe(false);
    expect(globToRegExp('get_*').test('GET_user')).toBe(false);
    expect(globToRegExp('a?c').test('abc')).toBe(true);
    expect(globToRegExp('a?c').test('ac')).toBe(false);
    expect(globToRegExp('a.c').test('abc')).toBe(false);
    expect(globToRegExp('a.c').test('a.c')).toBe(true);
    expect(globToRegExp('x(1)+[y]').test('x(1)+[y]')).toBe(true);
    expect(globToRegExp('*').test('line\nbreak')).toBe(true);
  });

  it('allow then deny; deny wins; no settings serve everything', () => {
    const cfg = { allow: ['get_*', 'list_*'], deny: ['get_secret*'] };
    expect(toolAllowed(cfg, 'get_user')).toBe(true);
    expect(toolAllowed(cfg, 'list_users')).toBe(true);
    expect(toolAllowed(cfg, 'get_secret_key')).toBe(false);
    expect(toolAllowed(cfg, 'delete_user')).toBe(false);
    expect(toolAllowed({ deny: ['delete_*'] }, 'delete_user')).toBe(false);
    expect(toolAllowed({ deny: ['delete_*'] }, 'anything')).toBe(true);
    expect(toolAllowed({ allow: [], deny: [] }, 'anything')).toBe(false);
    expect(toolAllowed(undefined, 'anything')).toBe(true);
  });

  it('servedToolList filters a tools array and leaves anything else alone', () => {
    const tools = [{ name: 'get_a' }, { name: 'delete_a' }, { name: 'b.c-d_9' }];
    expect(servedToolList({ deny: ['delete_*'] }, tools)).toEqual([{ name: 'get_a' }, { name: 'b.c-d_9' }]);
    expect(servedToolList({ deny: [] }, tools)).toEqual(tools);
    expect(servedToolList(undefined, tools)).toEqual(tools);
    expect(servedToolList({ deny: ['x'] }, undefined)).toBeUndefined();
  });

  it('tool names: 1 to 128 of A-Z a-z 0-9 _ - . (MCP server/tools); others are left out, reported, and refused', () => {
    for (const ok of ['a', 'getUser', 'DATA_EXPORT_v2', 'admin.tools.list', '-x-', 'n'.repeat(128)])
      expect(toolNameProblem(ok), ok).toBeUndefined();
    expect(toolNameProblem('')).toBe('is empty');
    expect(toolNameProblem('n'.repeat(129))).toBe('is longer than 128 characters (129)');
    expect(toolNameProblem('<b>x</b>')).toBe('has characters outside A-Z, a-z, 0-9, _, - and . ("<" ">" "/")');
    expect(toolNameProblem('a b,c/d\u0007')).toBe('has characters outside A-Z, a-z, 0-9, _, - and . (" " "," "/" "\\u0007")');
    expect(toolNameProblem('caf\u00e9')).toBe('has characters outside A-Z, a-z, 0-9, _, - and . ("\u00e9")');
    expect(toolNameProblem(7)).toBe('is not a string');
    const dropped: [string, string][] = [];
    const tools = [{ name: 'ok' }, { name: 'no way' }, { other: true }, { name: 'x'.repeat(200) }];
    expect(servedToolList(undefined, tools, (n, p) => dropped.push([n, p]))).toEqual([{ name: 'ok' }]);
    expect(dropped.map(([n]) => n)).toEqual(['no way', 'undefined', 'x'.repeat(200)]);
    expect(toolCallRefusal(undefined, 'ok')).toBeUndefined();
    expect(toolCallRefusal({ deny: ['ok'] }, 'ok')?.message).toBe('Unknown tool: ok');
    const e = toolCallRefusal(undefined, '<img src=x>')!;
    expect(e.code).toBe(-32602);
    expect(e.message).toMatch(
      /^Tool name not served: the name has characters outside .*; the gateway serves only tool names of 1 to 128 characters/,
    );
    expect(e.data).toEqual({ reason: 'invalid-tool-name', name: '<img src=x>' });
  });
});

describe('naming', () => {
  const cfg = (federation: Record<string, unknown>, names = ['github', 'jira']) => ({
    upstreams: Object.fromEntries(names.map((n) => [n, {}])),
    federation: { prefix: 'name' as const, prefixes: {}, ...federation },
  });

  it('members: every upstream in order by default, NAME_ prefixes, overrides, none', () => {
    expect(federationMembers(cfg({}))).toEqual([
      { name: 'github', prefix: 'github_' },
      { name: 'jira', prefix: 'jira_' },
    ]);
    expect(federationMembers(cfg({ upstreams: ['jira'], prefixes: { jira: 'j.' } }))).toEqual([{ name: 'jira', prefix: 'j.' }]);
    expect(federationMembers(cfg({ prefix: 'none', prefixes: { github: 'gh_' } }))).toEqual([
      { name: 'github', prefix: 'gh_' },
      { name: 'jira', prefix: '' },
    ]);
  });

  it('candidates: one member per name without overlap; every reading with overlapping prefixes', () => {
    const plain = new Naming(federationMembers(cfg({})));
    expect(plain.overlapping).toBe(false);
    expect(plain.candidates('github_search').map((c) => [c.member.name, c.name])).toEqual([['github', 'search']]);
    expect(plain.candidates('github_')).toEqual([]);
    expect(plain.candidates('search')).toEqual([]);
    expect(plain.expose(plain.members[1]!, 'issue')).toBe('jira_issue');

    const overlap = new Naming(federationMembers(cfg({}, ['db', 'db_backup'])));
    expect(overlap.overlapping).toBe(true);
    expect(overlap.candidates('db_backup_run').map((c) => [c.member.name, c.name])).toEqual([
      ['db', 'backup_run'],
      ['db_backup', 'run'],
    ]);
    const none = new Naming(federationMembers(cfg({ prefix: 'none' })));
    expect(none.overlapping).toBe(true);
    expect(none.candidates('search').map((c) => c.member.name)).toEqual(['github', 'jira']);
  });

  it('the federated cursor round-trips and refuses anything else with -32602', () => {
    const members = new Set(['a', 'b']);
    const c = encodeCursor('tools/list', { a: '4', b: 'opaque==' });
    expect(decodeCursor(c, 'tools/list', members)).toEqual({ a: '4', b: 'opaque==' });
    for (const bad of [
      '4',
      'fed1.!!',
      encodeCursor('prompts/list', { a: '1' }),
      encodeCursor('tools/list', { z: '1' }),
      encodeCursor('tools/list', {}),
      encodeCursor('tools/list', { a: '' }),
    ]) {
      expect(() => decodeCursor(bad, 'tools/list', members)).toThrow(expect.objectContaining({ code: -32602 }));
    }
  });
});

describe('resource URIs', () => {
  it('URI templates match what they can expand to', () => {
    const t = (tpl: string) => templateToRegExp(tpl)!;
    expect(t('fixture://plain/{id}').test('fixture://plain/7')).toBe(true);
    expect(t('fixture://plain/{id}').test('fixture://plain/7/8')).toBe(false);
    expect(t('fixture://plain/{id}').test('fixture://other/7')).toBe(false);
    expect(t('file:///{+path}').test('file:///a/b/c.txt')).toBe(true);
    expect(t('repo://{owner}/{repo}{?ref}').test('repo://me/x?ref=main')).toBe(true);
    expect(t('repo://{owner}/{repo}{?ref}').test('repo://me/x')).toBe(true);
    expect(t('a.b://{x}').test('aXb://y')).toBe(false);
    expect(templateToRegExp('broken://{x')).toBeUndefined();
  });

  it('owners: listed URIs first, then a template given as such, then the most specific matching templates; per principal', () => {
    const idx = new UriIndex();
    idx.recordUri('alice', 'a', 'x://doc/1');
    idx.recordTemplate('alice', 'b', 'x://doc/{id}');
    idx.recordTemplate('alice', 'c', 'y://{+rest}');
    idx.recordOffering('alice', 'd');
    expect(idx.owners('alice', 'x://doc/1')).toMatchObject({ owners: ['a'], by: 'uri' });
    expect(idx.owners('alice', 'x://doc/2')).toMatchObject({ owners: ['b'], by: 'match' });
    expect(idx.owners('alice', 'x://doc/{id}')).toMatchObject({ owners: ['b'], by: 'template' });
    expect(idx.owners('alice', 'y://deep/path').owners).toEqual(['c']);
    expect(idx.owners('alice', 'z://none')).toEqual({ owners: [], by: 'none', offering: ['a', 'b', 'c', 'd'] });
    expect(idx.owners('bob', 'x://doc/1')).toEqual({ owners: [], by: 'none', offering: [] });
    idx.recordUri('alice', 'c', 'x://doc/1');
    expect(idx.owners('alice', 'x://doc/1').owners).toEqual(['a', 'c']);
    expect(idx.listedBy('alice', 'x://doc/1')).toEqual(['a', 'c']);
    expect(idx.templateBy('alice', 'x://doc/{id}')).toEqual(['b']);
    // A catch-all template never takes a URI from a narrower one, nor from an upstream that listed it.
    idx.recordTemplate('alice', 'e', '{+uri}');
    expect(idx.owners('alice', 'x://doc/7').owners).toEqual(['b']);
    expect(idx.owners('alice', 'x://doc/1').owners).toEqual(['a', 'c']);
    expect(idx.owners('alice', 'q://anything')).toMatchObject({ owners: ['e'], by: 'match' });
    idx.recordTemplate('alice', 'f', 'x://doc/{id}');
    expect(idx.owners('alice', 'x://doc/7').owners).toEqual(['b', 'f']);
    expect(templateSpecificity('{+uri}')).toBe(0);
    expect(templateSpecificity('x://doc/{id}{?v}')).toBe(8);
    expect(idx.completeAt('alice')).toBeUndefined();
    idx.markComplete('alice', 5);
    expect(idx.completeAt('alice')).toBe(5);
  });
});

describe('merging', () => {
  it('capabilities: union, flags true when either is', () => {
    expect(
      unionCapabilities(
        { tools: { listChanged: true }, resources: { listChanged: false }, extensions: { x: {} } },
        { tools: {}, resources: { subscribe: true, listChanged: true }, completions: {}, extensions: { y: {} } },
      ),
    ).toEqual({
      tools: { listChanged: true },
      resources: { listChanged: true, subscribe: true },
      completions: {},
      extensions: { x: {}, y: {} },
    });
  });

  it('the honored filter: what any part honored, only what was asked', () => {
    const asked: ListenFilter = { toolsListChanged: true, resourceSubscriptions: ['u1', 'u2', 'u3'], taskIds: ['t1'] };
    expect(
      mergeHonored(asked, [
        { toolsListChanged: true, resourceSubscriptions: ['u1'] },
        { resourceSubscriptions: ['u3'], promptsListChanged: true },
      ]),
    ).toEqual({
      toolsListChanged: true,
      resourceSubscriptions: ['u1', 'u3'],
      taskIds: [],
    });
    expect(mergeHonored({}, [{ toolsListChanged: true }])).toEqual({});
  });

  /** A part whose sink the test drives. */
  function part(): ListenHandle & { sink?: SubscriptionSink; closed: boolean } {
    const p = {
      honored: {},
      closed: false,
      sink: undefined as SubscriptionSink | undefined,
      attach(s: SubscriptionSink) {
        p.sink = s;
      },
      async close() {
        p.closed = true;
      },
    };
    return p;
  }

  it('a merged subscription relays every part and ends once all parts have', () => {
    const [a, b] = [part(), part()];
    const got: string[] = [];
    let ended: GatewayError | undefined | 'open' = 'open';
    new MergedSubscription([a, b], {}).attach({ notify: (m) => got.push(m), end: (e) => (ended = e) });
    a.sink!.notify('notifications/tools/list_changed', {});
    b.sink!.notify('notifications/resources/updated', { uri: 'x' });
    a.sink!.end();
    expect(ended).toBe('open');
    b.sink!.notify('notifications/prompts/list_changed', {});
    b.sink!.end();
    expect(ended).toBeUndefined();
    expect(got).toEqual(['notifications/tools/list_changed', 'notifications/resources/updated', 'notifications/prompts/list_changed']);
  });

  it('a merged subscription ends with the first part error and closes the others', () => {
    const [a, b] = [part(), part()];
    let ended: unknown = 'open';
    new MergedSubscription([a, b], {}).attach({ notify: () => {}, end: (e) => (ended = e) });
    const lost = new GatewayError(-32603, 'lost');
    b.sink!.end(lost);
    expect(ended).toBe(lost);
    expect(a.closed).toBe(true);
    a.sink!.end();
    expect(ended).toBe(lost);
  });

  it('no parts: ends at once', () => {
    let ended = false;
    new MergedSubscription([], {}).attach({ notify: () => {}, end: () => (ended = true) });
    expect(ended).toBe(true);
  });
});

describe('federation config', () => {
  const fixture = { transport: 'stdio', command: 'node' };
  const parse = (raw: Record<string, unknown>) => parseConfig(raw, {}, '/');
  const problems = (raw: Record<string, unknown>): string => {
    try {
      parse(raw);
    } catch (e) {
      if (e instanceof ConfigError) return e.message;
      throw e;
    }
    throw new Error('the config was accepted');
  };

  it('defaults: off, every upstream, NAME_ prefixes; tools serve everything', () => {
    const cfg = parse({ upstreams: { a: fixture } });
    expect(cfg.federation).toEqual({ enabled: false, prefix: 'name', prefixes: {} });
    expect(cfg.upstreams.a!.tools).toEqual({ deny: [] });
  });

  it('federation.upstreams and federation.prefixes name federated upstreams, once', () => {
    const msg = problems({
      federation: { enabled: true, upstreams: ['a', 'nope', 'a'], prefixes: { b: 'x_' } },
      upstreams: { a: fixture, b: fixture },
    });
    expect(msg).toContain("federation.upstreams[1]: unknown upstream 'nope' (upstreams has a, b)");
    expect(msg).toContain("federation.upstreams[2]: upstream 'a' is listed twice");
    expect(msg).toContain("federation.prefixes.b: 'b' is not a federated upstream");
  });

  it('two upstreams with one prefix is an error naming both', () => {
    const msg = problems({ federation: { enabled: true, prefixes: { a: 'x_', b: 'x_' } }, upstreams: { a: fixture, b: fixture } });
    expect(msg).toMatch(/upstreams 'a' and 'b' have the same tool and prompt prefix 'x_'/);
    // Two upstreams without a prefix are allowed: their names are checked when they are listed.
    expect(parse({ federation: { enabled: true, prefix: 'none' }, upstreams: { a: fixture, b: fixture } }).federation.prefix).toBe('none');
  });

  it('a tool both upstreams allow by name, the same with their prefixes, is an error naming both', () => {
    const msg = problems({
      federation: { enabled: true, prefix: 'none' },
      upstreams: { a: { ...fixture, tools: { allow: ['search', 'get_*'] } }, b: { ...fixture, tools: { allow: ['search'] } } },
    });
    expect(msg).toContain("upstreams.b.tools.allow[0]: tool 'search' would be served on /mcp by both upstreams 'a' and 'b'");
    // With their prefixes the names differ; a denied name does not count; federation off checks nothing.
    expect(() =>
      parse({
        federation: { enabled: true },
        upstreams: { a: { ...fixture, tools: { allow: ['search'] } }, b: { ...fixture, tools: { allow: ['search'] } } },
      }),
    ).not.toThrow();
    expect(() =>
      parse({
        federation: { enabled: true, prefix: 'none' },
        upstreams: { a: { ...fixture, tools: { allow: ['search'] } }, b: { ...fixture, tools: { allow: ['search'], deny: ['search'] } } },
      }),
    ).not.toThrow();
    expect(() =>
      parse({
        federation: { prefix: 'none' },
        upstreams: { a: { ...fixture, tools: { allow: ['search'] } }, b: { ...fixture, tools: { allow: ['search'] } } },
      }),
    ).not.toThrow();
  });

  it('prefixes use the characters of tool names', () => {
    expect(problems({ federation: { enabled: true, prefixes: { a: 'a b' } }, upstreams: { a: fixture } })).toContain(
      'federation.prefixes.a',
    );
    expect(problems({ upstreams: { a: { ...fixture, tools: { deny: [''] } } } })).toContain('upstreams.a.tools.deny[0]');
  });
});
