/**
 * MCP Apps (`io.modelcontextprotocol/ui`, ext-apps SEP-1865) on the federated endpoint. Apps are
 * `ui://` resources that tools name in `_meta.ui.resourceUri`, and two upstreams may well both
 * have `ui://app/index.html`. So on `/mcp` a `ui://` URI carries its upstream's prefix the way a
 * tool name does, in front of what follows the scheme: `ui://app/index.html` of the upstream
 * with prefix `a_` is `ui://a_app/index.html` (the prefix's characters, letters, digits, `_`, `-`
 * and `.`, keep it a valid URI). Listed resources, URI templates, tools' `_meta.ui.resourceUri`
 * (and the older `_meta["ui/resourceUri"]`), read results, resource links and embedded resources of
 * `tools/call` and `prompts/get` results, and resource updates are shown so;
 * requests naming such a URI reach the upstream with its own URI. Other URIs keep their form. The
 * scheme matches in any case (`UI://` too, RFC 3986 §3.1) and keeps the case it was given.
 */
import { isObject } from '../protocol/envelope.js';
import type { ListenHandle } from '../router/subscriptions.js';

const UI = 'ui://';

/** Whether `uri` is a `ui://` URI, the scheme in any case. */
function isAppUri(uri: unknown): uri is string {
  return typeof uri === 'string' && uri.slice(0, UI.length).toLowerCase() === UI;
}

/** The `ui://` URI the client sees for `member`'s own `uri`; any other value is returned as it is. */
export function exposeAppUri(member: { prefix: string }, uri: unknown): unknown {
  return isAppUri(uri) ? uri.slice(0, UI.length) + member.prefix + uri.slice(UI.length) : uri;
}

/** `member`'s own URI for a `ui://` URI the client sent ({@link exposeAppUri} undone); any other value as it is. */
export function ownAppUri<T>(member: { prefix: string }, uri: T): T {
  const carries = isAppUri(uri) && uri.startsWith(member.prefix, UI.length);
  return (carries ? uri.slice(0, UI.length) + uri.slice(UI.length + member.prefix.length) : uri) as T;
}

/**
 * The members whose prefix a `ui://` URI the client sent carries (with something after it), the
 * longest prefix first (prefixes may nest: `db_` and `db_backup_`), else in federation order: who
 * may serve an app no listing names (ext-apps lets a server leave UI-only resources out of
 * `resources/list`). Empty for any other URI.
 */
export function appMembers<M extends { prefix: string }>(members: readonly M[], uri: string): M[] {
  if (!isAppUri(uri)) return [];
  const fits = members.filter((m) => uri.length > UI.length + m.prefix.length && uri.startsWith(m.prefix, UI.length));
  return fits.sort((x, y) => y.prefix.length - x.prefix.length);
}

/** A tool with its `_meta.ui.resourceUri` (and `_meta["ui/resourceUri"]`) as the client sees it. */
function exposeTool(member: { prefix: string }, tool: Record<string, unknown>): Record<string, unknown> {
  const meta = tool._meta;
  if (!isObject(meta)) return tool;
  const out: Record<string, unknown> = { ...meta };
  if (isObject(meta.ui) && typeof meta.ui.resourceUri === 'string')
    out.ui = { ...meta.ui, resourceUri: exposeAppUri(member, meta.ui.resourceUri) };
  if (typeof meta['ui/resourceUri'] === 'string') out['ui/resourceUri'] = exposeAppUri(member, meta['ui/resourceUri']);
  return { ...tool, _meta: out };
}

/**
 * The items of one member's list page (`field` of the result: `tools`, `prompts`, `resources`,
 * `resourceTemplates`) with their `ui://` URIs as the client sees them; [] when `items` is not an array.
 */
export function exposeAppItems(field: string, member: { prefix: string }, items: unknown): unknown[] {
  if (!Array.isArray(items)) return [];
  const key = field === 'resources' ? 'uri' : field === 'resourceTemplates' ? 'uriTemplate' : undefined;
  return items.map((item) => {
    if (!isObject(item)) return item;
    if (field === 'tools') return exposeTool(member, item);
    return key && isAppUri(item[key]) ? { ...item, [key]: exposeAppUri(member, item[key]) } : item;
  });
}

/** A `resources/read` result of `member` with each content's `ui://` URI as the client sees it. */
export function exposeReadResult(member: { prefix: string }, result: Record<string, unknown>): Record<string, unknown> {
  if (!Array.isArray(result.contents)) return result;
  const contents = result.contents.map((c: unknown) => (isObject(c) ? { ...c, uri: exposeAppUri(member, c.uri) } : c));
  return { ...result, contents };
}

/** A content block with its `ui://` URI as the client sees it: a `resource_link`'s `uri`, an embedded `resource`'s `resource.uri`. */
function exposeContent(member: { prefix: string }, block: unknown): unknown {
  if (!isObject(block)) return block;
  if (block.type === 'resource_link') return { ...block, uri: exposeAppUri(member, block.uri) };
  if (block.type === 'resource' && isObject(block.resource))
    return { ...block, resource: { ...block.resource, uri: exposeAppUri(member, block.resource.uri) } };
  return block;
}

/**
 * A `tools/call` result (`content`) or `prompts/get` result (`messages[].content`) of `member` with
 * the `ui://` URIs of its resource links and embedded resources as the client sees them; any other
 * result (`input_required`, a task) as it is.
 */
export function exposeAppLinks(member: { prefix: string }, result: Record<string, unknown>): Record<string, unknown> {
  const out = { ...result };
  if (Array.isArray(result.content)) out.content = result.content.map((b: unknown) => exposeContent(member, b));
  if (Array.isArray(result.messages))
    out.messages = result.messages.map((m: unknown) => (isObject(m) ? { ...m, content: exposeContent(member, m.content) } : m));
  return out;
}

/**
 * `member`'s subscription as the client sees it: `notifications/resources/updated` and the honored
 * `resourceSubscriptions` with their `ui://` URIs exposed ({@link exposeAppUri}).
 */
export function exposeAppUpdates(member: { prefix: string }, part: ListenHandle): ListenHandle {
  const subs = part.honored.resourceSubscriptions;
  return {
    honored: { ...part.honored, ...(subs ? { resourceSubscriptions: subs.map((u) => exposeAppUri(member, u) as string) } : {}) },
    attach: (sink) =>
      part.attach({
        notify: (method, params) =>
          sink.notify(method, method === 'notifications/resources/updated' ? { ...params, uri: exposeAppUri(member, params.uri) } : params),
        end: (error) => sink.end(error),
      }),
    close: () => part.close(),
  };
}
