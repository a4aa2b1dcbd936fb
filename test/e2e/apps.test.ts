/**
 * MCP Apps (`io.modelcontextprotocol/ui`) through the gateway: a v1 (2025-11-25) and a v2
 * (2026-07-28) server, each with the tool `show` naming its app `ui://app/index.html`
 * (test/fixtures/apps-server.ts). On `/mcp/NAME` the tool's `_meta.ui`, the resource's listing and
 * its read pass unchanged to 2026-07-28 clients (raw JSON-RPC) and legacy clients (the v1 SDK), and
 * the extension is declared exactly when the upstream declared it. On `/mcp` each upstream's app
 * carries its prefix (`ui://PREFIXapp/index.html`) in the lists and the tools' `_meta.ui.resourceUri`,
 * and reads back from its own upstream.
 */
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listen, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { APP_MIME, APP_URI, RESOURCE_UI, TOOL_UI } from '../fixtures/apps-server.js';

const APPS = fileURLToPath(new URL('../fixtures/apps-server.ts', import.meta.url));
const UI = 'io.modelcontextprotocol/ui';

function apps(era: 'legacy' | 'modern', label: string, declared = true, env: Record<string, string> = {}): Record<string, unknown> {
  return {
    transport: 'stdio',
    command: process.execPath,
    args: ['--import', 'tsx', APPS, era],
    env: { APPS_LABEL: label, ...(declared ? {} : { APPS_UNDECLARED: '1' }), ...env },
  };
}

const page = (label: string) => `<!DOCTYPE html><html><body>${label}</body></html>`;

/** A v1 SDK (legacy) client session on `url`. */
async function legacyClient(url: string): Promise<Client> {
  const client = new Client({ name: 'apps-host', version: '1.0.0' }, { capabilities: { extensions: { [UI]: { mimeTypes: [APP_MIME] } } } });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

/** Tools, resources and the read of `uri`, as a 2026-07-28 client gets them on `url`. */
async function modernView(url: string, uri = APP_URI) {
  const caps = { extensions: { [UI]: { mimeTypes: [APP_MIME] } } };
  const get = async (method: string, params: Record<string, unknown> = {}) => {
    const r = await rpc(url, method, params, { caps });
    expect(r.body.result, JSON.stringify(r.body)).toBeDefined();
    return r.body.result;
  };
  return {
    capabilities: (await get('server/discover')).capabilities,
    tools: (await get('tools/list')).tools,
    resources: (await get('resources/list')).resources,
    read: await get('resources/read', { uri }),
  };
}

/** The same as a legacy client gets it. */
async function legacyView(url: string, uri = APP_URI) {
  const client = await legacyClient(url);
  try {
    return {
      capabilities: client.getServerCapabilities() as Record<string, any>,
      tools: (await client.listTools()).tools,
      resources: (await client.listResources()).resources,
      read: await client.readResource({ uri }),
    };
  } finally {
    await client.close();
  }
}

describe('MCP Apps through the gateway', () => {
  let gw: TestGateway;

  beforeAll(async () => {
    gw = await startGateway({
      federation: { enabled: true, upstreams: ['lg', 'md', 'hid'] },
      upstreams: {
        hid: apps('legacy', 'hidden app', true, { APPS_UNLISTED: '1' }),
        lg: apps('legacy', 'legacy app'),
        md: apps('modern', 'modern app'),
        lgx: apps('legacy', 'plain legacy', false),
        mdx: apps('modern', 'plain modern', false),
      },
    });
  });
  afterAll(() => gw?.close());

  for (const [name, label] of [
    ['lg', 'legacy app'],
    ['md', 'modern app'],
  ] as const) {
    for (const [client, view] of [
      ['2026-07-28', modernView],
      ['legacy', legacyView],
    ] as const) {
      it(`/mcp/${name} (${name === 'lg' ? 'legacy' : '2026-07-28'} upstream) passes the app to a ${client} client unchanged and declares the extension`, async () => {
        const v = await view(gw.url(name));
        expect(v.capabilities.extensions?.[UI]).toEqual({});
        const show = v.tools.find((t: any) => t.name === 'show');
        expect(show?._meta).toEqual({ ui: TOOL_UI });
        expect(v.resources).toContainEqual(expect.objectContaining({ uri: APP_URI, mimeType: APP_MIME, _meta: { ui: RESOURCE_UI } }));
        expect(v.read.contents).toEqual([{ uri: APP_URI, mimeType: APP_MIME, text: page(label), _meta: { ui: RESOURCE_UI } }]);
      });
    }
  }

  it("a client's declaration of the extension reaches the upstream, in every era pair", async () => {
    const declared = { [UI]: { mimeTypes: [APP_MIME] } };
    for (const name of ['lg', 'md']) {
      const r = await rpc(gw.url(name), 'tools/call', { name: 'client_extensions', arguments: {} }, { caps: { extensions: declared } });
      expect(JSON.parse(r.body.result?.content?.[0]?.text ?? 'null'), `${name}: ${JSON.stringify(r.body)}`).toEqual(declared);
      const client = await legacyClient(gw.url(name));
      const legacy = await client.callTool({ name: 'client_extensions', arguments: {} });
      expect(JSON.parse((legacy.content as { text: string }[])[0]!.text), name).toEqual(declared);
      await client.close();
    }
  });

  for (const name of ['lgx', 'mdx']) {
    it(`/mcp/${name}: an upstream that does not declare the extension is not said to have it, in either client era`, async () => {
      for (const view of [modernView, legacyView]) {
        const v = await view(gw.url(name));
        expect(v.capabilities.tools).toBeDefined();
        expect(v.capabilities.extensions?.[UI]).toBeUndefined();
        expect(v.capabilities.experimental?.[UI]).toBeUndefined();
      }
    });
  }

  for (const [client, view] of [
    ['2026-07-28', modernView],
    ['legacy', legacyView],
  ] as const) {
    it(`/mcp gives each upstream's ui://app/index.html its own URI, in lists and tools, and reads each back (${client} client)`, async () => {
      const fed = `${gw.base}/mcp`;
      const v = await view(fed, 'ui://lg_app/index.html');
      expect(v.capabilities.extensions?.[UI]).toEqual({});
      const byName = Object.fromEntries(v.tools.map((t: any) => [t.name, t]));
      expect(byName.lg_show._meta).toEqual({ ui: { ...TOOL_UI, resourceUri: 'ui://lg_app/index.html' } });
      expect(byName.md_show._meta).toEqual({ ui: { ...TOOL_UI, resourceUri: 'ui://md_app/index.html' } });
      const uris = v.resources.map((r: any) => r.uri).sort();
      expect(uris).toEqual(['ui://lg_app/index.html', 'ui://md_app/index.html']);
      for (const r of v.resources) expect(r).toMatchObject({ mimeType: APP_MIME, _meta: { ui: RESOURCE_UI } });
      expect(v.read.contents).toEqual([
        { uri: 'ui://lg_app/index.html', mimeType: APP_MIME, text: page('legacy app'), _meta: { ui: RESOURCE_UI } },
      ]);
      const md = client === 'legacy' ? await legacyView(fed, 'ui://md_app/index.html') : await modernView(fed, 'ui://md_app/index.html');
      expect(md.read.contents).toEqual([
        { uri: 'ui://md_app/index.html', mimeType: APP_MIME, text: page('modern app'), _meta: { ui: RESOURCE_UI } },
      ]);
    });
  }

  it('/mcp links each tool result to its own app', async () => {
    for (const name of ['lg', 'md']) {
      const r = await rpc(`${gw.base}/mcp`, 'tools/call', { name: `${name}_show`, arguments: {} });
      expect(r.body.result?.content?.[1], JSON.stringify(r.body)).toEqual({
        type: 'resource_link',
        uri: `ui://${name}_app/index.html`,
        name: 'app',
        mimeType: APP_MIME,
      });
    }
  });

  it('/mcp reads an app no upstream lists by the prefix of its URI; an unknown prefix is -32602', async () => {
    const fed = `${gw.base}/mcp`;
    const tools = (await rpc(fed, 'tools/list')).body.result.tools;
    expect(tools.find((t: any) => t.name === 'hid_show')?._meta.ui.resourceUri).toBe('ui://hid_app/index.html');
    const r = await rpc(fed, 'resources/read', { uri: 'ui://hid_app/index.html' });
    expect(r.body.result?.contents, JSON.stringify(r.body)).toEqual([
      { uri: 'ui://hid_app/index.html', mimeType: APP_MIME, text: page('hidden app'), _meta: { ui: RESOURCE_UI } },
    ]);
    const unknown = await rpc(fed, 'resources/read', { uri: 'ui://zz_app/index.html' });
    expect(unknown.body.error?.code, JSON.stringify(unknown.body)).toBe(-32602);
  });

  it('/mcp lists ui:// URI templates with the prefix and reads a page of each from its own upstream', async () => {
    const fed = `${gw.base}/mcp`;
    const templates = (await rpc(fed, 'resources/templates/list')).body.result.resourceTemplates.map((t: any) => t.uriTemplate);
    expect(templates.sort()).toEqual(['ui://lg_app/pages/{page}', 'ui://md_app/pages/{page}']);
    for (const [prefix, label] of [
      ['lg_', 'legacy app'],
      ['md_', 'modern app'],
    ]) {
      const r = await rpc(fed, 'resources/read', { uri: `ui://${prefix}app/pages/one` });
      expect(r.body.result?.contents, JSON.stringify(r.body)).toEqual([
        { uri: `ui://${prefix}app/pages/one`, mimeType: APP_MIME, text: `page one of ${label}` },
      ]);
    }
  });

  it('/mcp subscribes to an app under its own URI upstream and reports its update under the prefixed one', async () => {
    const s = await listen(`${gw.base}/mcp`, { resourceSubscriptions: ['ui://lg_app/index.html'] }, { id: 'apps-1' });
    try {
      expect((await s.next(10_000))?.params?.notifications).toEqual({ resourceSubscriptions: ['ui://lg_app/index.html'] });
      expect(await s.next(10_000)).toEqual({
        jsonrpc: '2.0',
        method: 'notifications/resources/updated',
        params: { uri: 'ui://lg_app/index.html', _meta: { 'io.modelcontextprotocol/subscriptionId': 'apps-1' } },
      });
    } finally {
      s.close();
    }
  });
});

describe('MCP Apps on /mcp with nested prefixes (db_ and db_backup_)', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({
      federation: { enabled: true, upstreams: ['db', 'dbb'], prefixes: { db: 'db_', dbb: 'db_backup_' } },
      upstreams: {
        db: apps('legacy', 'db app', true, { APPS_UNLISTED: '1' }),
        dbb: apps('legacy', 'backup app', true, { APPS_UNLISTED: '1' }),
      },
    });
  });
  afterAll(() => gw?.close());

  it('an app no upstream lists is read from the upstream with the longest prefix its URI carries', async () => {
    const fed = `${gw.base}/mcp`;
    const tools = (await rpc(fed, 'tools/list')).body.result.tools;
    expect(tools.find((t: any) => t.name === 'db_backup_show')?._meta.ui.resourceUri).toBe('ui://db_backup_app/index.html');
    const backup = await rpc(fed, 'resources/read', { uri: 'ui://db_backup_app/index.html' });
    expect(backup.body.result?.contents, JSON.stringify(backup.body)).toEqual([
      { uri: 'ui://db_backup_app/index.html', mimeType: APP_MIME, text: page('backup app'), _meta: { ui: RESOURCE_UI } },
    ]);
    const db = await rpc(fed, 'resources/read', { uri: 'ui://db_app/index.html' });
    expect(db.body.result?.contents?.[0]?.text, JSON.stringify(db.body)).toBe(page('db app'));
  });
});

describe('MCP Apps on /mcp when no federated upstream declares the extension', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({
      federation: { enabled: true },
      upstreams: { lgx: apps('legacy', 'plain legacy', false), mdx: apps('modern', 'plain modern', false) },
    });
  });
  afterAll(() => gw?.close());

  it('the merged capabilities do not declare it, for either client era', async () => {
    const r = await rpc(`${gw.base}/mcp`, 'server/discover');
    expect(r.body.result.capabilities.tools, JSON.stringify(r.body)).toBeDefined();
    expect(r.body.result.capabilities.extensions?.[UI]).toBeUndefined();
    const client = await legacyClient(`${gw.base}/mcp`);
    expect((client.getServerCapabilities() as Record<string, any>).extensions?.[UI]).toBeUndefined();
    await client.close();
  });
});
