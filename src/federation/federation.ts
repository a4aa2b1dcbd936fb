/**
 * The federation layer: one endpoint, `POST /mcp`, for a configured set of upstreams
 * (`federation` in the config). It sits between the front door and the router: it decides which
 * federated upstream a request is for, rewrites the names the client sees into the upstream's
 * own, and hands the request to the router (`Router.handle`, `Router.listen`), which serves it
 * as it serves `POST /mcp/NAME`, whatever era the upstream speaks (legacy upstreams through the
 * Exchange, 2026-07-28 upstreams through the pass-through). Lists, `server/discover` and
 * subscriptions are merged here (with merge.ts and listen.ts).
 *
 * Routing rules:
 * - Tool and prompt names carry the upstream's prefix (`NAME_` by default, per upstream
 *   configurable, or none). `tools/call`, `prompts/get` and `completion/complete` with a
 *   `ref/prompt` go to the upstream whose prefix the name carries, without it. When prefixes
 *   overlap (an unprefixed upstream, or one prefix beginning another), the upstreams' listings
 *   decide.
 * - Resource URIs stay as they are (`ui://` ones get the prefix: apps.ts). `resources/read`, `completion/complete` with a
 *   `ref/resource` and `resourceSubscriptions` go to the upstream that listed the URI (else the most specific template matching it,
 *   else the longest prefix a `ui://` URI carries) for this principal; an unknown URI lists every upstream's resources once, then -32602.
 * - Conflicts found at run time (two upstreams serving one name, URI or URI template) never fail a
 *   request: the upstream earlier in federation order keeps the entry, the later one's is left out
 *   of the lists (logged, counted, on the admin page: src/observability/dropped.ts) and calls go
 *   to the earlier one.
 * - A retry with `requestState` goes to the upstream the sealed state names (`up`); a state of
 *   another upstream than the name's is -32602, like any state that does not fit its request.
 * - `tasks/get|update|cancel` go to the upstream of the task record (legacy upstreams), or the
 *   one whose binding the task id verifies under (2026-07-28 upstreams).
 *
 * Legacy clients on `POST /mcp` reach this layer through the reverse bridge
 * (src/federation/federated.ts), as 2026-07-28 requests built from their session.
 */
import { LRUCache } from 'lru-cache';
import type { UpstreamConfig } from '../config/schema.js';
import { ClientConnection } from '../protocol/connection.js';
import type { FederationContext } from './context.js';
import { INVALID_STATE } from '../security/seal.js';
import type { Router } from '../router/router.js';
import { canonicalJson } from '../protocol/canonical.js';
import { isObject, type ValidatedRequest } from '../protocol/envelope.js';
import { GatewayError, invalidParams, methodNotFound } from '../protocol/errors.js';
import type { DroppedKind } from '../observability/dropped.js';
import type { Logger } from '../observability/log.js';
import type { ListenFilter, ListenHandle } from '../router/subscriptions.js';
import { TASK_NOT_FOUND, declaresTasks, tasksExtensionRequired } from '../protocol/tasks.js';
import { invalidToolName, toolNameProblem, unknownTool } from '../upstream/tool-policy.js';
import { toolAllowed } from '../config/globs.js';
import { federationMembers, type Member } from '../config/federation-members.js';
import { openMerged } from './listen.js';
import { gatherMembers, isMethodNotFound, mergedDiscover, mergedHints } from './merge.js';
import { decodeCursor, encodeCursor, Naming, type Candidate } from './naming.js';
import { UriIndex } from './resources.js';
import { appMembers, exposeAppItems, exposeAppLinks, exposeAppUpdates, exposeReadResult, ownAppUri } from './apps.js';

/** The federated endpoint's `upstream` in request logs, metrics, legacy sessions and error data. */
export const FEDERATED_LABEL = '*';

/** A federated upstream. */
export interface FederatedUpstream extends Member {
  /** The upstream's configuration (its `required`, `tools`, …). */
  cfg: UpstreamConfig;
}

export type { FederationContext, MemberGate } from './context.js';

/** Tool or prompt names: the two kinds of prefixed names. */
type NameKind = 'tools' | 'prompts';

/** One upstream's part of a merged list page: its items as it sent them. */
interface Page {
  member: FederatedUpstream;
  items: unknown[];
}

/** The list methods: the result field that holds the items, and which names are prefixed. */
const LISTS: Record<string, { field: string; kind?: NameKind }> = {
  'tools/list': { field: 'tools', kind: 'tools' },
  'prompts/list': { field: 'prompts', kind: 'prompts' },
  'resources/list': { field: 'resources' },
  'resources/templates/list': { field: 'resourceTemplates' },
};

/** How long a complete listing of names (made to tell overlapping prefixes apart) is trusted, in ms. */
const NAME_INDEX_TTL_MS = 30_000;
/** Most such listings kept (per kind, principal and client capabilities). */
const NAME_INDEX_MAX = 1_000;
/** Most pages read of one upstream's list when the federation lists everything itself. */
const MAX_PAGES = 100;

const unknownName = (kind: NameKind, exposed: string) =>
  kind === 'tools' ? unknownTool(exposed) : invalidParams(`Unknown prompt: ${exposed}`);

/** The federated endpoint's request routing, between the front door and the router. */
export class Federation {
  /** The federated upstreams, in order. */
  readonly members: FederatedUpstream[];
  /** Their tool and prompt prefixes: exposing an upstream's names and reading the client's back. */
  readonly naming: Naming<FederatedUpstream>;
  private readonly byName: Map<string, FederatedUpstream>;
  private readonly uris = new UriIndex();
  /** Resource listings in progress, per principal (concurrent misses share one). */
  private readonly refreshing = new Map<string, Promise<void>>();
  /** Complete listings of names, by kind, principal and client capabilities. */
  private readonly nameIndexes = new LRUCache<string, Map<string, Candidate<FederatedUpstream>[]>>({
    max: NAME_INDEX_MAX,
    ttl: NAME_INDEX_TTL_MS,
  });

  constructor(
    private readonly router: Router,
    private readonly log: Logger,
  ) {
    this.members = federationMembers(router.cfg).map((m) => ({ ...m, cfg: router.upstreams.get(m.name)!.cfg }));
    this.naming = new Naming(this.members);
    this.byName = new Map(this.members.map((m) => [m.name, m]));
    log.info(
      { upstreams: this.members.map((m) => ({ name: m.name, prefix: m.prefix })), overlapping: this.naming.overlapping },
      'federation: POST /mcp serves these upstreams',
    );
  }

  /**
   * Serves one validated 2026-07-28 request on the federated endpoint: routed to one upstream
   * through the router, or merged from all of them (`server/discover`, the list methods).
   * @returns the JSON-RPC `result` (always with `resultType`).
   * @throws GatewayError: what the router throws for the upstream it went to; -32602 for an unknown
   *   tool or prompt name, a tool the upstream's `tools` policy does not serve or whose name breaks
   *   the tool-name rules (`data.reason: "invalid-tool-name"`), a resource URI no upstream serves (`data.uri`, `data.candidates`), a `requestState` of another
   *   upstream than the name's, an invalid cursor, or an unknown task; -32021 (HTTP 400) for
   *   `tasks/*` without the tasks extension; -32601 (HTTP 404) when no federated upstream offers
   *   the method's capability.
   */
  async handle(req: ValidatedRequest, ctx: FederationContext): Promise<Record<string, unknown>> {
    switch (req.method) {
      case 'server/discover':
        return this.discover(req, ctx);
      case 'tools/list':
      case 'prompts/list':
      case 'resources/list':
      case 'resources/templates/list':
        return this.list(req, ctx);
      case 'tools/call':
      case 'prompts/get':
        return this.named(req, ctx);
      case 'resources/read':
        return this.read(req, ctx);
      case 'completion/complete':
        return this.complete(req, ctx);
      case 'tasks/get':
      case 'tasks/update':
      case 'tasks/cancel':
        return this.task(req, ctx);
      default:
        throw methodNotFound(`${req.method} needs a streaming response; use the HTTP front door`);
    }
  }

  /** Sends `req` with `params` (or a list the federation makes itself) to one upstream through the router, which runs `ctx.memberGate` first when routed there alone. */
  private async forward(
    m: FederatedUpstream,
    req: ValidatedRequest,
    params: Record<string, unknown>,
    ctx: FederationContext,
    method = req.method,
  ): Promise<Record<string, unknown>> {
    const { memberGate, ...routed } = ctx; // run by the router: a refusal gets the member call's audit line
    const admit = memberGate && !LISTS[method] && method !== 'server/discover' ? () => memberGate(m.name, method, params) : undefined;
    return this.router.handle(m.name, { ...req, method, params }, { ...routed, admit });
  }

  /** {@link gatherMembers} with this federation's log. */
  private gather<T>(what: string, members: readonly FederatedUpstream[], fn: (m: FederatedUpstream) => Promise<T>) {
    return gatherMembers(this.log, what, members, fn);
  }

  /**
   * `server/discover` (MCP 2026-07-28 server/discover) of the whole fleet: the union of the
   * upstreams' capabilities, and their instructions, one section per upstream (headed by its name,
   * saying its prefix).
   */
  private async discover(req: ValidatedRequest, ctx: FederationContext): Promise<Record<string, unknown>> {
    const { answers, partial } = await this.gather('server/discover', this.members, (m) => this.forward(m, req, {}, ctx));
    return mergedDiscover(answers, partial);
  }

  /**
   * A list method, merged: each page holds the next page of every upstream that has more, in
   * member order; tool and prompt names prefixed; the cursor holds each upstream's own cursor.
   * Listed resource URIs and templates are remembered for routing.
   */
  private async list(req: ValidatedRequest, ctx: FederationContext): Promise<Record<string, unknown>> {
    const { field, kind } = LISTS[req.method]!;
    const cursor = req.params.cursor;
    const decoded = cursor === undefined ? undefined : decodeCursor(String(cursor), req.method, new Set(this.byName.keys()));
    const positions: [FederatedUpstream, string | undefined][] = decoded
      ? this.members.filter((m) => Object.hasOwn(decoded, m.name)).map((m) => [m, decoded[m.name]])
      : this.members.map((m) => [m, undefined]);
    const at = new Map(positions);
    const { answers, partial } = await this.gather(
      req.method,
      positions.map(([m]) => m),
      (m) => this.forward(m, req, at.get(m) === undefined ? {} : { cursor: at.get(m) }, ctx),
    );
    const next: Record<string, string> = {};
    const pages: Page[] = answers.map(({ member, value }) => {
      if (typeof value.nextCursor === 'string' && value.nextCursor !== '') next[member.name] = value.nextCursor;
      return { member, items: exposeAppItems(field, member, value[field]) };
    });
    const items = kind
      ? await this.namedItems(kind, pages, req, ctx)
      : await this.resourceItems(req.method, pages, decoded !== undefined || Object.keys(next).length > 0, req, ctx);
    return {
      resultType: 'complete',
      [field]: items,
      ...(Object.keys(next).length ? { nextCursor: encodeCursor(req.method, next) } : {}),
      ...mergedHints(
        answers.map((a) => a.value),
        partial,
      ),
    };
  }

  /**
   * The tools or prompts of one merged page, named as the client sees them. An entry whose name
   * an earlier upstream (in federation order) also serves is left out, as is a second entry of one
   * name on the page (each reported as a `conflict`), so the client sees every name once and the
   * name leads to the upstream that keeps it. With overlapping prefixes, the complete listings
   * ({@link nameIndex}) decide, since the earlier upstream's entry may be on a page not listed yet.
   */
  private async namedItems(kind: NameKind, pages: readonly Page[], req: ValidatedRequest, ctx: FederationContext): Promise<unknown[]> {
    let index = this.naming.overlapping ? await this.nameIndex(kind, req, ctx) : undefined;
    const unindexed = (i: Map<string, Candidate<FederatedUpstream>[]>) =>
      pages.some(({ member, items }) =>
        items.some((item) => {
          if (!isObject(item) || typeof item.name !== 'string') return false;
          const exposed = this.exposedName(kind, member, item.name, false);
          return exposed !== undefined && !i.get(exposed)?.some((o) => o.member === member);
        }),
      );
    // A name the kept listings lack (listed since): list again once.
    if (index && unindexed(index)) index = await this.nameIndex(kind, req, ctx, true);
    const out: unknown[] = [];
    const seen = new Map<string, FederatedUpstream>();
    for (const { member, items } of pages) {
      for (const item of items) {
        if (!isObject(item) || typeof item.name !== 'string') {
          out.push(item);
          continue;
        }
        const exposed = this.exposedName(kind, member, item.name, true);
        if (exposed === undefined) continue;
        const owner = seen.get(exposed) ?? index?.get(exposed)?.[0]?.member;
        if (seen.has(exposed) || (owner !== undefined && owner !== member)) {
          this.dropConflict(kind === 'tools' ? 'tool' : 'prompt', member, item.name, exposed, owner ?? member);
          continue;
        }
        seen.set(exposed, member);
        out.push({ ...item, name: exposed });
      }
    }
    return out;
  }

  /**
   * The resources or resource templates of one merged page, remembered for routing. A URI (or URI
   * template) an earlier upstream (in federation order) also lists is left out, as is a second
   * entry of one URI on the page (each reported as a `conflict`); reads of it go to the earlier
   * upstream. When the answer is paged, the complete listings ({@link refreshUris}, trusted for
   * 30 s) decide, since the earlier upstream's entry may be on a page not listed yet.
   */
  private async resourceItems(
    method: string,
    pages: readonly Page[],
    paged: boolean,
    req: ValidatedRequest,
    ctx: FederationContext,
  ): Promise<unknown[]> {
    const templates = method === 'resources/templates/list';
    const key = templates ? 'uriTemplate' : 'uri';
    const principal = ctx.principal;
    for (const { member } of pages) this.uris.recordOffering(principal, member.name);
    if (paged && !this.uris.completeWithin(principal, NAME_INDEX_TTL_MS)) {
      await this.refreshUris(req, ctx).catch((e: unknown) => {
        if (!(e instanceof GatewayError)) throw e;
        this.log.debug({ method, err: e.message }, 'federation: resources not listed completely; the page decides alone');
      });
    }
    for (const { member, items } of pages) {
      for (const item of items) {
        if (!isObject(item) || typeof item[key] !== 'string') continue;
        if (templates) this.uris.recordTemplate(principal, member.name, item[key]);
        else this.uris.recordUri(principal, member.name, item[key]);
      }
    }
    const out: unknown[] = [];
    const seen = new Set<string>();
    for (const { member, items } of pages) {
      for (const item of items) {
        if (!isObject(item) || typeof item[key] !== 'string') {
          out.push(item);
          continue;
        }
        const value = item[key];
        const listers = templates ? this.uris.templateBy(principal, value) : this.uris.listedBy(principal, value);
        const owner = this.members.find((m) => listers.includes(m.name));
        if (seen.has(value) || (owner !== undefined && owner !== member)) {
          this.dropConflict(templates ? 'resourceTemplate' : 'resource', member, value, value, owner ?? member);
          continue;
        }
        seen.add(value);
        out.push(item);
      }
    }
    return out;
  }

  /** Reports that `member`'s entry `name` (shown as `shown`) is left out of a list on /mcp because `owner` serves it. */
  private dropConflict(kind: DroppedKind, member: FederatedUpstream, name: string, shown: string, owner: FederatedUpstream): void {
    const detail =
      owner === member
        ? `on /mcp, '${shown}' is listed twice by this upstream; the first is kept`
        : `on /mcp, '${shown}' is served by '${owner.name}', earlier in federation order`;
    this.router.dropped.note({ upstream: member.name, kind, name, reason: 'conflict', detail });
  }

  /**
   * The name the client sees for tool or prompt `name` of `member`, or undefined when that name
   * breaks the tool-name rules (a tool's name with its prefix longer than 128 characters; the
   * upstream's own name was checked behind the router): such a tool is left out, reported when
   * `report` is set.
   */
  private exposedName(kind: NameKind, member: FederatedUpstream, name: string, report: boolean): string | undefined {
    const exposed = this.naming.expose(member, name);
    const problem = kind === 'tools' ? toolNameProblem(exposed) : undefined;
    if (!problem) return exposed;
    if (report)
      this.router.dropped.note({
        upstream: member.name,
        kind: 'tool',
        name,
        reason: 'invalid-name',
        detail: `on /mcp, with the prefix '${member.prefix}', the name ${problem}`,
      });
    return undefined;
  }

  /** Every item of one upstream's list (all pages, at most {@link MAX_PAGES}). */
  private async listAll(
    m: FederatedUpstream,
    method: string,
    req: ValidatedRequest,
    ctx: FederationContext,
  ): Promise<Record<string, unknown>[]> {
    const { field } = LISTS[method]!;
    const out: Record<string, unknown>[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < MAX_PAGES; page++) {
      const r = await this.forward(m, req, cursor === undefined ? {} : { cursor }, ctx, method as ValidatedRequest['method']);
      out.push(...exposeAppItems(field, m, r[field]).filter(isObject));
      cursor = typeof r.nextCursor === 'string' && r.nextCursor !== '' ? r.nextCursor : undefined;
      if (cursor === undefined) break;
    }
    return out;
  }

  /**
   * Every tool or prompt name on /mcp for this caller's view (principal and capabilities), with
   * the upstreams that serve it in federation order (the first keeps the name), from complete
   * listings of every member; kept for a short while.
   */
  private async nameIndex(
    kind: NameKind,
    req: ValidatedRequest,
    ctx: FederationContext,
    fresh = false,
  ): Promise<Map<string, Candidate<FederatedUpstream>[]>> {
    const key = `${kind}\u0000${ctx.principal}\u0000${canonicalJson(req.clientCapabilities)}`;
    const cached = fresh ? undefined : this.nameIndexes.get(key);
    if (cached) return cached;
    const { answers } = await this.gather(`${kind}/list`, this.members, (m) => this.listAll(m, `${kind}/list`, req, ctx));
    const index = new Map<string, Candidate<FederatedUpstream>[]>();
    for (const { member, value } of answers) {
      for (const item of value) {
        if (typeof item.name !== 'string') continue;
        const exposed = this.exposedName(kind, member, item.name, false);
        if (exposed === undefined) continue;
        index.set(exposed, [...(index.get(exposed) ?? []), { member, name: item.name }]);
      }
    }
    this.nameIndexes.set(key, index);
    return index;
  }

  /**
   * The upstream and its own name behind a tool or prompt name the client sent: the one member
   * whose prefix the name carries; with overlapping prefixes, the one of those whose listing has
   * it, the earliest in federation order when several do (the others' entries are left out of
   * the lists). With a `requestState`, the member the state names (`stateUpstream`) must be one of them.
   * @throws GatewayError -32602 unknown name, or a state of another upstream (INVALID_STATE).
   */
  private async resolveName(
    kind: NameKind,
    exposed: string,
    req: ValidatedRequest,
    ctx: FederationContext,
    stateUpstream?: string,
  ): Promise<Candidate<FederatedUpstream>> {
    const candidates = this.naming.candidates(exposed);
    if (stateUpstream !== undefined) {
      const mine = candidates.find((c) => c.member.name === stateUpstream);
      if (!mine) throw invalidParams(INVALID_STATE);
      return mine;
    }
    if (candidates.length === 0) throw unknownName(kind, exposed);
    if (candidates.length === 1) return candidates[0]!;
    for (const fresh of [false, true]) {
      const owners = ((await this.nameIndex(kind, req, ctx, fresh)).get(exposed) ?? []).filter((o) =>
        candidates.some((c) => c.member === o.member && c.name === o.name),
      );
      if (owners.length > 0) return owners[0]!;
    }
    throw unknownName(kind, exposed);
  }

  /**
   * Whether `principal` holds a grant for the upstream of consent round `state` (a sealed
   * `requestState`), waiting at most `credentials.consentWaitMs` ms; false for another state.
   */
  async consentGranted(state: unknown, principal: string, signal?: AbortSignal): Promise<boolean> {
    const claims = await this.router.sealer.open(state).catch(() => undefined);
    if (!claims?.cs) return false;
    const { consentWaitMs } = this.router.cfg.credentials;
    const sinceMs = (claims.iat ?? 0) * 1000;
    return (await this.router.credentials.waitForGrant(claims.up, principal, consentWaitMs, signal, sinceMs)).granted;
  }

  /** The upstream a sealed `requestState` names (its `up` claim). @throws GatewayError -32602 INVALID_STATE. */
  private async stateUpstream(state: unknown): Promise<string> {
    return (await this.router.sealer.open(state)).up;
  }

  /** `tools/call` and `prompts/get`: to the upstream the name (or the retry's state) leads to, under its own name. */
  private async named(req: ValidatedRequest, ctx: FederationContext): Promise<Record<string, unknown>> {
    const kind: NameKind = req.method === 'tools/call' ? 'tools' : 'prompts';
    const exposed = String(req.params.name);
    const problem = kind === 'tools' ? toolNameProblem(exposed) : undefined;
    if (problem) throw invalidToolName(exposed, problem);
    const stateUp = req.params.requestState !== undefined ? await this.stateUpstream(req.params.requestState) : undefined;
    const target = await this.resolveName(kind, exposed, req, ctx, stateUp);
    if (kind === 'tools' && !toolAllowed(target.member.cfg.tools, target.name)) throw unknownTool(exposed);
    return exposeAppLinks(target.member, await this.forward(target.member, req, { ...req.params, name: target.name }, ctx));
  }

  /** Lists every member's resources and templates for this principal (once at a time per principal), remembering them. */
  private async refreshUris(req: ValidatedRequest, ctx: FederationContext): Promise<void> {
    let pending = this.refreshing.get(ctx.principal);
    if (!pending) {
      // Shared by concurrent requests of the principal: not cut short when one of their clients leaves.
      const own: FederationContext = { principal: ctx.principal, token: ctx.token, connection: new ClientConnection(), timing: ctx.timing };
      const started = Date.now();
      pending = this.gather('resources/list', this.members, async (m) => {
        let offered = false;
        let failure: unknown;
        for (const method of ['resources/list', 'resources/templates/list']) {
          try {
            const items = await this.listAll(m, method, req, own);
            offered = true;
            for (const item of items) {
              if (typeof item.uri === 'string') this.uris.recordUri(ctx.principal, m.name, item.uri);
              if (typeof item.uriTemplate === 'string') this.uris.recordTemplate(ctx.principal, m.name, item.uriTemplate);
            }
          } catch (e) {
            if (!isMethodNotFound(e)) failure ??= e;
          }
        }
        if (offered) this.uris.recordOffering(ctx.principal, m.name);
        if (failure !== undefined) throw failure;
        if (!offered) throw methodNotFound(`upstream '${m.name}' offers no resources`);
      })
        .then(({ partial }) => {
          if (!partial) this.uris.markComplete(ctx.principal, started);
        })
        .finally(() => this.refreshing.delete(ctx.principal));
      this.refreshing.set(ctx.principal, pending);
    }
    await pending;
  }

  /**
   * The upstream that serves resource `uri` for this principal: one that listed it; else one that
   * listed it as a template; else one with the most specific template matching it, trusted only
   * when every member's resources were listed within 30 s (so a URI an upstream lists is never
   * taken by another's template). On a miss, or a template match not so trusted, every member's
   * resources are listed first. Several upstreams: the earliest in federation order. None, and
   * exactly one member offers resources: that one.
   * @throws GatewayError -32602 when no upstream does (`data.uri`, `data.candidates`).
   */
  private async resolveUri(uri: string, req: ValidatedRequest, ctx: FederationContext): Promise<FederatedUpstream> {
    let found = this.uris.owners(ctx.principal, uri);
    if (found.by === 'none' || (found.by === 'match' && !this.uris.completeWithin(ctx.principal, NAME_INDEX_TTL_MS))) {
      await this.refreshUris(req, ctx);
      found = this.uris.owners(ctx.principal, uri);
    }
    const members = [...this.byName.keys()];
    const owners = members.filter((n) => found.owners.includes(n));
    const owner = owners.length > 0 ? this.byName.get(owners[0]!) : appMembers(this.members, uri)[0];
    if (owner) return owner;
    const offering = members.filter((n) => found.offering.includes(n));
    if (offering.length === 1) return this.byName.get(offering[0]!)!;
    throw invalidParams(
      `Resource not found: no federated upstream lists '${uri}' or a template matching it (upstreams offering resources: ${offering.map((o) => `'${o}'`).join(', ') || 'none'})`,
      { uri, candidates: offering },
    );
  }

  /** `resources/read`: to the upstream the retry's state names, else the one that listed the URI. */
  private async read(req: ValidatedRequest, ctx: FederationContext): Promise<Record<string, unknown>> {
    let member: FederatedUpstream;
    if (req.params.requestState !== undefined) {
      const up = this.byName.get(await this.stateUpstream(req.params.requestState));
      if (!up) throw invalidParams(INVALID_STATE);
      member = up;
    } else {
      member = await this.resolveUri(String(req.params.uri), req, ctx);
    }
    return exposeReadResult(member, await this.forward(member, req, { ...req.params, uri: ownAppUri(member, req.params.uri) }, ctx));
  }

  /** `completion/complete`: a `ref/prompt` by its prefixed name, a `ref/resource` by its URI or template. */
  private async complete(req: ValidatedRequest, ctx: FederationContext): Promise<Record<string, unknown>> {
    const ref = req.params.ref as Record<string, unknown>;
    if (ref.type === 'ref/prompt' && typeof ref.name === 'string') {
      const target = await this.resolveName('prompts', ref.name, req, ctx);
      return this.forward(target.member, req, { ...req.params, ref: { ...ref, name: target.name } }, ctx);
    }
    if (ref.type === 'ref/resource' && typeof ref.uri === 'string') {
      const m = await this.resolveUri(ref.uri, req, ctx);
      return this.forward(m, req, { ...req.params, ref: { ...ref, uri: ownAppUri(m, ref.uri) } }, ctx);
    }
    throw invalidParams('completion/complete: params.ref must be {"type":"ref/prompt","name":…} or {"type":"ref/resource","uri":…}');
  }

  /**
   * The member a task id belongs to for this principal: the one whose binding a 2026-07-28
   * upstream's task id verifies under, or the upstream of the gateway's own task record.
   */
  private async taskOwner(taskId: string, principal: string): Promise<FederatedUpstream | undefined> {
    if (taskId.startsWith('p1.')) return this.members.find((m) => this.router.taskIds.unwrap(m.name, principal, taskId) !== undefined);
    const record = await this.router.store.tasks.get(taskId);
    return record && record.principal === principal ? this.byName.get(record.upstream) : undefined;
  }

  /** `tasks/get|update|cancel` (tasks extension): to the task's upstream. */
  private async task(req: ValidatedRequest, ctx: FederationContext): Promise<Record<string, unknown>> {
    if (!declaresTasks(req)) throw tasksExtensionRequired();
    const member = await this.taskOwner(String(req.params.taskId), ctx.principal);
    if (!member) throw invalidParams(TASK_NOT_FOUND);
    return this.forward(member, req, req.params, ctx);
  }

  /**
   * Opens a `subscriptions/listen` on the federated endpoint: the list-change flags go to every
   * member (each honors what its upstream declares), each `resourceSubscriptions` URI to the
   * upstream that serves it (unknown URIs are not honored), each `taskIds` entry to
   * its task's upstream (unknown ids are not honored). The parts are opened through the router and
   * merged; the acknowledged filter is the union of what they honored.
   * @throws GatewayError -32021 (HTTP 400) for `taskIds` without the tasks extension; the error of
   *   a `required` member that could not be listened to.
   */
  async listen(req: ValidatedRequest, ctx: { principal: string; token?: string }): Promise<ListenHandle> {
    const filter = (req.params.notifications ?? {}) as ListenFilter;
    if (filter.taskIds?.length && !declaresTasks(req)) throw tasksExtensionRequired();
    const parts = new Map<FederatedUpstream, ListenFilter>();
    const add = (m: FederatedUpstream, patch: (f: ListenFilter) => void) => {
      const f = parts.get(m) ?? {};
      patch(f);
      parts.set(m, f);
    };
    for (const flag of ['toolsListChanged', 'promptsListChanged', 'resourcesListChanged'] as const) {
      if (filter[flag]) for (const m of this.members) add(m, (f) => (f[flag] = true));
    }
    const rctx: FederationContext = { principal: ctx.principal, token: ctx.token, connection: new ClientConnection() };
    for (const uri of new Set(filter.resourceSubscriptions ?? [])) {
      const m = await this.resolveUri(uri, req, rctx).catch((e) => {
        if (e instanceof GatewayError) return undefined;
        throw e;
      });
      if (m) add(m, (f) => (f.resourceSubscriptions = [...(f.resourceSubscriptions ?? []), ownAppUri(m, uri)]));
    }
    for (const id of new Set(filter.taskIds ?? [])) {
      const m = await this.taskOwner(id, ctx.principal);
      if (m) add(m, (f) => (f.taskIds = [...(f.taskIds ?? []), id]));
    }
    const open = (m: FederatedUpstream, f: ListenFilter) =>
      this.router.listen(m.name, { ...req, params: { ...req.params, notifications: f } }, ctx);
    return openMerged(this.log, filter, [...parts], async (m, f) => exposeAppUpdates(m, await open(m, f)));
  }
}
