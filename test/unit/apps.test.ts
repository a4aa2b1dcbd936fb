/** MCP Apps helpers: which extensions pass every cell, and the `ui://` URIs of the federated endpoint. */
import { describe, expect, it } from 'vitest';
import { passedExtensions, UI_EXTENSION } from '../../src/protocol/capabilities.js';
import { appMembers, exposeAppItems, exposeAppUri, ownAppUri } from '../../src/federation/apps.js';

describe('passedExtensions', () => {
  it('keeps the MCP Apps extension, declared in extensions or (legacy) experimental, and nothing else', () => {
    const ui = { mimeTypes: ['text/html;profile=mcp-app'] };
    expect(passedExtensions({ extensions: { [UI_EXTENSION]: ui, 'io.modelcontextprotocol/tasks': {} } })).toEqual({ [UI_EXTENSION]: ui });
    expect(passedExtensions({ experimental: { [UI_EXTENSION]: {} } })).toEqual({ [UI_EXTENSION]: {} });
    expect(passedExtensions({ extensions: { 'io.modelcontextprotocol/tasks': {} } })).toBeUndefined();
    expect(passedExtensions(undefined)).toBeUndefined();
  });
});

describe('ui:// URIs on /mcp', () => {
  const a = { name: 'a', prefix: 'a_' };
  const none = { name: 'n', prefix: '' };

  it('carry the prefix after the scheme and come back to the upstream as its own', () => {
    expect(exposeAppUri(a, 'ui://app/index.html')).toBe('ui://a_app/index.html');
    expect(ownAppUri(a, 'ui://a_app/index.html')).toBe('ui://app/index.html');
    expect(exposeAppUri(a, 'file:///x')).toBe('file:///x');
    expect(exposeAppUri(none, 'ui://app/index.html')).toBe('ui://app/index.html');
  });

  it('in tools (_meta.ui.resourceUri and the older ui/resourceUri), resources and templates; other fields untouched', () => {
    const tool = { name: 't', _meta: { ui: { resourceUri: 'ui://app/x', visibility: ['app'] }, 'ui/resourceUri': 'ui://app/x', other: 1 } };
    expect(exposeAppItems('tools', a, [tool, { name: 'plain' }])).toEqual([
      { name: 't', _meta: { ui: { resourceUri: 'ui://a_app/x', visibility: ['app'] }, 'ui/resourceUri': 'ui://a_app/x', other: 1 } },
      { name: 'plain' },
    ]);
    expect(exposeAppItems('resources', a, [{ uri: 'ui://app/x' }, { uri: 'file:///y' }])).toEqual([
      { uri: 'ui://a_app/x' },
      { uri: 'file:///y' },
    ]);
    expect(exposeAppItems('resourceTemplates', a, [{ uriTemplate: 'ui://app/{p}' }])).toEqual([{ uriTemplate: 'ui://a_app/{p}' }]);
    expect(exposeAppItems('tools', a, undefined)).toEqual([]);
  });

  it('lead to the members whose prefix they carry, in order', () => {
    expect(appMembers([a, none], 'ui://a_app/x')).toEqual([a, none]);
    expect(appMembers([a, none], 'ui://b_app/x')).toEqual([none]);
    expect(appMembers([a], 'ui://a_')).toEqual([]);
    expect(appMembers([a, none], 'file:///a_x')).toEqual([]);
  });

  it('lead to the longest prefix first when prefixes nest', () => {
    const db = { name: 'db', prefix: 'db_' };
    const backup = { name: 'dbb', prefix: 'db_backup_' };
    expect(appMembers([db, backup], 'ui://db_backup_app/index.html')).toEqual([backup, db]);
    expect(appMembers([db, backup], 'ui://db_app/index.html')).toEqual([db]);
  });

  it('match the ui: scheme in any case, keeping the case given', () => {
    expect(exposeAppUri(a, 'UI://app/index.html')).toBe('UI://a_app/index.html');
    expect(ownAppUri(a, 'Ui://a_app/index.html')).toBe('Ui://app/index.html');
    expect(appMembers([a], 'UI://a_app/x')).toEqual([a]);
    expect(exposeAppItems('resources', a, [{ uri: 'UI://app/x' }])).toEqual([{ uri: 'UI://a_app/x' }]);
  });
});
