/**
 * The gateway's approval policy (docs/approvals.md): which tool calls the user must approve through
 * the gateway's own form (src/security/approval-form.ts) before they reach the upstream, and the
 * approvals remembered for a while in the shared store (src/store/approvals.ts).
 *
 * A tool of an upstream needs approval when its name matches one of the upstream's
 * `approvals.tools` (names or globs, src/config/globs.ts), or with `approvals.destructive` when its
 * annotations say `destructiveHint: true`, or with `approvals.notReadOnly` when they say
 * `readOnlyHint: false`, with the spec's defaults for hints left out (a tool without annotations,
 * or one no listing names, is destructive and not read-only). The annotations are those of the upstream's `tools/list` as the gateway saw
 * it: a complete listing the gateway served to anyone ({@link Approvals.saw}), or, when none is
 * known, one listing made through the router for the caller; kept per upstream until its tools
 * change ({@link Approvals.forget}) or for {@link ANNOTATIONS_TTL_MS}.
 *
 * {@link ApprovalGate} asks 2026-07-28 clients (bridge and pass-through cells alike; the router runs
 * it for `tools/call` after the credential gate, before routing): a call that needs approval and is
 * not remembered gets `{resultType: "input_required", inputRequests: {"approval": <the form>},
 * requestState}`, the state sealed with the approval marker `ap`, bound to principal, upstream,
 * method, tool and argument digest, valid `requestState.ttlMs`, single use. The retry with the
 * answer: accept runs the call as a fresh call (remembered when the user ticked `remember`);
 * decline or cancel is `{resultType: "complete", content, isError: true}` and nothing runs; no
 * answer, or arguments other than the ones approved, a new round. A client that cannot answer a
 * form gets -32021 (HTTP 400) `requiredCapabilities: {elicitation: {form: {}}}`. A shared store
 * that cannot be reached fails the call (-32603 `store-unavailable`, nothing runs), except that an
 * accept it cannot remember still runs (logged).
 */
import { globToRegExp } from '../config/globs.js';
import type { UpstreamApprovalsConfig } from '../config/approvals-schema.js';
import { ClientConnection, type ApprovalAudit, type CallContext } from '../protocol/connection.js';
import type { ValidatedRequest } from '../protocol/envelope.js';
import { invalidParams, missingCapability, type GatewayError } from '../protocol/errors.js';
import type { Logger } from '../observability/log.js';
import {
  META_CLIENT_CAPABILITIES,
  META_PROTOCOL_VERSION,
  PROTOCOL_VERSION,
  type ClientCapabilities,
  type InputRequest,
} from '../protocol/wire.js';
import { missingFor } from '../protocol/capabilities.js';
import { APPROVAL_KEY, approvalAnswer, approvalRefusal, approvalRequest } from '../security/approval-form.js';
import { digestOf, INVALID_STATE, type StateClaims, type StateSealer } from '../security/seal.js';
import type { RememberedApprovals } from '../store/approvals.js';
import { predatesLedger, type SpentStates } from '../store/shared.js';
import type { RelayCaller } from './relays.js';

/** How long the annotations of a listing are trusted without a list change, in ms. */
export const ANNOTATIONS_TTL_MS = 60_000;

/** Most pages read when the policy lists an upstream's tools itself. */
const MAX_PAGES = 100;

/**
 * Who asks whether a call needs approval: the principal and token a listing of the upstream's tools
 * runs as, and the client capabilities the call declares (the listing declares the same, so the
 * upstream session it opens serves the call after it); none: a listing without capabilities.
 */
export interface ApprovalCaller extends RelayCaller {
  clientCapabilities?: Record<string, unknown>;
}

/** One call as the policy sees it: who calls which tool of which upstream, with which arguments. */
export interface ApprovalCall {
  principal: string;
  upstream: string;
  tool: string;
  /** The call's `arguments` (undefined counts as `{}`). */
  args: unknown;
}

/** What the policy reads of a tool's annotations. */
interface ToolHints {
  destructive: boolean;
  notReadOnly: boolean;
}

/** A listing of one upstream: hints by tool name, and when it was taken (`performance.now()` ms). */
interface Listing {
  tools: Map<string, ToolHints>;
  atMs: number;
}

/**
 * Lists every tool of `upstream` as `who` sees it (all pages), through the router.
 * @throws whatever the listing throws (GatewayError -32603 when the upstream cannot be reached).
 */
export type ToolLister = (upstream: string, who: ApprovalCaller) => Promise<unknown[]>;

/** The hints of the tools of one listing. */
function hintsOf(tools: readonly unknown[]): Map<string, ToolHints> {
  const out = new Map<string, ToolHints>();
  for (const t of tools) {
    if (!t || typeof t !== 'object' || typeof (t as { name?: unknown }).name !== 'string') continue;
    const a = (t as { annotations?: { destructiveHint?: unknown; readOnlyHint?: unknown } }).annotations;
    out.set((t as { name: string }).name, hintsOfAnnotations(a));
  }
  return out;
}

/**
 * The hints of a tool's `annotations` with the defaults of the spec's `ToolAnnotations` (MCP
 * 2025-06-18 §Tools): `readOnlyHint` false, `destructiveHint` true (meaningful only when not
 * read-only). So a tool without annotations, or one the listing lacks, counts as destructive and
 * not read-only: the policy fails closed.
 */
function hintsOfAnnotations(a: { destructiveHint?: unknown; readOnlyHint?: unknown } | undefined): ToolHints {
  const readOnly = a?.readOnlyHint === true;
  return { destructive: !readOnly && a?.destructiveHint !== false, notReadOnly: !readOnly };
}

const compiled = new WeakMap<readonly string[], RegExp[]>();

/** Whether `tool` matches one of `patterns` (compiled once per configured list). */
function matches(patterns: readonly string[], tool: string): boolean {
  if (patterns.length === 0) return false;
  let res = compiled.get(patterns);
  if (!res) compiled.set(patterns, (res = patterns.map(globToRegExp)));
  return res.some((r) => r.test(tool));
}

/** The approval policy of the configured upstreams (see the file header). */
export class Approvals {
  private readonly listings = new Map<string, Listing>();
  private readonly loading = new Map<string, Promise<Listing>>();
  /** Bumped per upstream by {@link forget}, so a listing begun before is not stored after. */
  private readonly generations = new Map<string, number>();

  /**
   * @param config the `approvals` settings of an upstream (undefined: unknown upstream, nothing needs approval).
   * @param store where remembered approvals live (`SharedStore.approvals`).
   * @param list lists an upstream's tools for a caller, when the policy needs annotations it has not seen.
   */
  constructor(
    private readonly config: (upstream: string) => UpstreamApprovalsConfig | undefined,
    private readonly store: RememberedApprovals,
    private readonly list: ToolLister,
  ) {}

  /** Whether any tool of `upstream` may need approval (some pattern, or an annotation rule). */
  applies(upstream: string): boolean {
    const cfg = this.config(upstream);
    return !!cfg && (cfg.tools.length > 0 || cfg.destructive || cfg.notReadOnly);
  }

  /**
   * Whether a call of `tool` at `upstream` needs the user's approval. Reads the tool's annotations
   * only for the annotation rules, listing the upstream's tools for `who` when none are known (or
   * the known listing lacks the tool, or is older than {@link ANNOTATIONS_TTL_MS}).
   * @throws whatever that listing throws (GatewayError -32603 when the upstream cannot be reached):
   *   the call does not run unasked.
   */
  async needs(upstream: string, tool: string, who: ApprovalCaller): Promise<boolean> {
    const cfg = this.config(upstream);
    if (!cfg) return false;
    if (matches(cfg.tools, tool)) return true;
    if (!cfg.destructive && !cfg.notReadOnly) return false;
    const hints = await this.hints(upstream, tool, who);
    const h = hints ?? hintsOfAnnotations(undefined);
    return (cfg.destructive && h.destructive) || (cfg.notReadOnly && h.notReadOnly);
  }

  /** How long an accepted approval of `upstream` may be remembered, in ms (0: never). */
  rememberMs(upstream: string): number {
    return this.config(upstream)?.rememberMs ?? 0;
  }

  /**
   * The key a remembered approval of `call` is stored under: base64url SHA-256 of the principal,
   * upstream, tool and the digest of the canonical arguments (nothing of them readable in the store).
   */
  rememberKey(call: ApprovalCall): string {
    return digestOf([call.principal, call.upstream, call.tool, digestOf(call.args)]);
  }

  /** Whether an approval of exactly `call` is remembered (false when the upstream remembers none). @throws StoreUnavailable */
  async remembered(call: ApprovalCall): Promise<boolean> {
    if (this.rememberMs(call.upstream) <= 0) return false;
    return this.store.remembered(this.rememberKey(call));
  }

  /** Remembers the approval of `call` for the upstream's `rememberMs` (nothing when 0). @throws StoreUnavailable */
  async remember(call: ApprovalCall): Promise<void> {
    const ttlMs = this.rememberMs(call.upstream);
    if (ttlMs > 0) await this.store.remember(this.rememberKey(call), ttlMs);
  }

  /** Takes the annotations of a complete `tools/list` of `upstream` that the gateway served. */
  saw(upstream: string, tools: readonly unknown[]): void {
    if (this.applies(upstream)) this.listings.set(upstream, { tools: hintsOf(tools), atMs: performance.now() });
  }

  /** Forgets what is known of `upstream`'s tools (they changed). */
  forget(upstream: string): void {
    this.generations.set(upstream, (this.generations.get(upstream) ?? 0) + 1);
    this.listings.delete(upstream);
    this.loading.delete(upstream);
  }

  /** The hints of `tool`, from the known listing when it is fresh and has the tool, else from a new one. */
  private async hints(upstream: string, tool: string, who: ApprovalCaller): Promise<ToolHints | undefined> {
    const known = this.listings.get(upstream);
    if (known && performance.now() - known.atMs < ANNOTATIONS_TTL_MS) {
      const hints = known.tools.get(tool);
      if (hints) return hints;
    }
    return (await this.load(upstream, who)).tools.get(tool);
  }

  /** One listing of `upstream` at a time, shared by the callers waiting for it. */
  private load(upstream: string, who: ApprovalCaller): Promise<Listing> {
    let pending = this.loading.get(upstream);
    if (!pending) {
      const generation = this.generations.get(upstream) ?? 0;
      const loaded: Promise<Listing> = this.list(upstream, who)
        .then((tools) => {
          const listing = { tools: hintsOf(tools), atMs: performance.now() };
          if ((this.generations.get(upstream) ?? 0) === generation) this.listings.set(upstream, listing);
          return listing;
        })
        .finally(() => {
          if (this.loading.get(upstream) === loaded) this.loading.delete(upstream);
        });
      this.loading.set(upstream, (pending = loaded));
    }
    return pending;
  }
}

/**
 * A {@link ToolLister} over `handle` (the router's): `tools/list` as a 2026-07-28 request of the
 * caller with its client capabilities, page after page (at most {@link MAX_PAGES}).
 */
export function listThrough(
  handle: (upstream: string, req: ValidatedRequest, ctx: CallContext) => Promise<Record<string, unknown>>,
): ToolLister {
  return async (upstream, who) => {
    const tools: unknown[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < MAX_PAGES; page++) {
      const req: ValidatedRequest = {
        id: `approvals-${crypto.randomUUID()}`,
        method: 'tools/list',
        params: cursor === undefined ? {} : { cursor },
        meta: { [META_PROTOCOL_VERSION]: PROTOCOL_VERSION, [META_CLIENT_CAPABILITIES]: who.clientCapabilities ?? {} },
        protocolVersion: PROTOCOL_VERSION,
        clientCapabilities: who.clientCapabilities ?? {},
        paramHeaders: {},
      };
      const result = await handle(upstream, req, { principal: who.principal, token: who.token, connection: new ClientConnection() });
      if (Array.isArray(result.tools)) tools.push(...(result.tools as unknown[]));
      cursor = typeof result.nextCursor === 'string' ? result.nextCursor : undefined;
      if (!cursor) break;
    }
    return tools;
  };
}

/** What {@link ApprovalGate.admit} decided: route `req`, or answer `answer` at once. */
export type ApprovalAdmission = { req: ValidatedRequest; answer?: undefined } | { req?: undefined; answer: Record<string, unknown> };

/** A form-mode `elicitation/create`, as {@link answersForms} asks `missingFor` about it. */
const FORM_REQUEST = { method: 'elicitation/create', params: { mode: 'form' } } as InputRequest;

/** Whether `caps` can answer a form: `elicitation: {}` (form implied) or `elicitation.form` (`missingFor`). */
export function answersForms(caps: Record<string, unknown>): boolean {
  return missingFor(caps as ClientCapabilities, FORM_REQUEST) === undefined;
}

/**
 * The refusal of a call that needs approval from a client that cannot answer a form: -32021 (HTTP 400)
 * with `data.requiredCapabilities: {elicitation: {form: {}}}`.
 * @param where where the capabilities were declared, when not the request's own `clientCapabilities`.
 */
export function formRequired(tool: string, upstream: string, where?: string): GatewayError {
  return missingCapability(
    { elicitation: { form: {} } },
    'elicitation.form',
    where,
    `Tool '${tool}' of upstream '${upstream}' needs the user's approval, asked through a form: that needs`,
  );
}

/** The approval rounds of 2026-07-28 `tools/call` requests (see the file header). */
export class ApprovalGate {
  constructor(
    private readonly approvals: Approvals,
    private readonly sealer: StateSealer,
    private readonly ledger: SpentStates,
    /** How long an approval round's state is valid, in ms (`requestState.ttlMs`). */
    private readonly ttlMs: number,
    private readonly log: Logger,
  ) {}

  /**
   * The `tools/call` `req` to route (its approval state and answer taken out once accepted), or
   * the answer: an approval round, or the refusal the user chose. Writes `ctx.audit.approval`.
   * A `requestState` that is not an approval state belongs to a later round of a call that passed
   * this gate, and is left to the cell.
   * @throws GatewayError -32602 a bad, expired, foreign or replayed approval state, or an answer that
   *   is not an ElicitResult; -32021 (HTTP 400) the call needs approval and the client cannot answer
   *   a form; -32603 when the upstream's tools cannot be listed (annotation rules).
   */
  async admit(upstream: string, req: ValidatedRequest, ctx: CallContext): Promise<ApprovalAdmission> {
    const call: ApprovalCall = { principal: ctx.principal, upstream, tool: String(req.params.name), args: req.params.arguments };
    const note = (approval: ApprovalAudit) => void (ctx.audit && (ctx.audit.approval = approval));
    if (req.params.requestState !== undefined) {
      const claims = await this.sealer.open(req.params.requestState);
      if (!claims.ap) return { req };
      const answered = await this.answered(claims, call, req);
      if (answered) {
        const { requestState: _s, inputResponses: _i, ...params } = req.params;
        if (answered.action !== 'accept') {
          note(answered.action === 'decline' ? 'declined' : 'cancelled');
          return { answer: { resultType: 'complete', ...approvalRefusal(answered.action, upstream, call.tool) } };
        }
        if (answered.remember) await this.approvals.remember(call).catch((e: unknown) => this.storeFailed(call, e));
        note('accepted');
        return { req: { ...req, params } };
      }
    } else {
      const who = { principal: ctx.principal, token: ctx.token, clientCapabilities: req.clientCapabilities as Record<string, unknown> };
      if (!(await this.approvals.needs(upstream, call.tool, who))) return { req };
      if (await this.approvals.remembered(call)) {
        note('remembered');
        return { req };
      }
    }
    if (!answersForms(req.clientCapabilities as Record<string, unknown>)) {
      throw formRequired(call.tool, upstream);
    }
    note('asked');
    return { answer: await this.round(call) };
  }

  /**
   * The answer of a retry with approval state `claims`, the state spent; undefined when the round
   * must be asked again (no answer given, or other arguments than the ones it asked about).
   * @throws GatewayError -32602 a foreign or replayed state, or an answer that is not an ElicitResult.
   */
  private async answered(
    claims: StateClaims,
    call: ApprovalCall,
    req: ValidatedRequest,
  ): Promise<ReturnType<typeof approvalAnswer> | undefined> {
    if (claims.up !== call.upstream || claims.sub !== call.principal || claims.m !== req.method || claims.n !== call.tool)
      throw invalidParams(INVALID_STATE);
    const answers = req.params.inputResponses as Record<string, unknown> | undefined;
    const given = !!answers && typeof answers === 'object' && APPROVAL_KEY in answers;
    const answer = given ? approvalAnswer(answers[APPROVAL_KEY]) : undefined;
    if (predatesLedger(this.ledger, claims.iat) || !(await this.ledger.spend(claims.jti, claims.expMs))) throw invalidParams(INVALID_STATE);
    // Arguments other than the approved ones: the user is asked about these.
    return claims.d === digestOf(call.args) ? answer : undefined;
  }

  /** Logs that the approval of `call` could not be remembered (the store failed). */
  private storeFailed(call: ApprovalCall, e: unknown): void {
    this.log.warn({ upstream: call.upstream, tool: call.tool, err: (e as Error).message }, 'approval not remembered: the store failed');
  }

  /** An approval round for `call`. */
  private async round(call: ApprovalCall): Promise<Record<string, unknown>> {
    const claims: StateClaims = {
      up: call.upstream,
      sub: call.principal,
      m: 'tools/call',
      n: call.tool,
      d: digestOf(call.args),
      ex: '',
      rep: '',
      rnd: 1,
      keys: [APPROVAL_KEY],
      jti: crypto.randomUUID(),
      expMs: Date.now() + this.ttlMs,
      ap: true,
    };
    return {
      resultType: 'input_required',
      inputRequests: { [APPROVAL_KEY]: approvalRequest(call.upstream, call.tool, call.args, this.approvals.rememberMs(call.upstream)) },
      requestState: await this.sealer.seal(claims),
    };
  }
}
