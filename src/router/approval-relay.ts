/**
 * Approvals for legacy client sessions (2024-11-05 … 2025-11-25 on `/mcp/NAME`; docs/approvals.md):
 * a {@link LegacyRelay} in front of the session's real relay (the legacy pass-through or the reverse
 * bridge) for an upstream with `approvals` configured.
 *
 * - A client `tools/call` of a tool the policy says needs approval (src/router/approvals.ts), not
 *   remembered for these exact arguments: the gateway sends the client its own `elicitation/create`
 *   form (`approvalRequest`: the tool, the upstream and the masked arguments; a `remember` box when
 *   `rememberMs` > 0) on that request's stream (`relatedRequestId`). `mode: "form"` goes only to
 *   2025-11-25 sessions; 2025-06-18 has no `mode`. `accept`: the request goes to the real relay
 *   (remembered when the answer says so); `decline`, `cancel`, an error answer or no answer within
 *   `requestState.ttlMs` (the time a 2026-07-28 client has to answer the same form): the gateway
 *   answers the call with the `isError` tool result (`approvalRefusal`) and the upstream never sees
 *   it. An answer that is not an ElicitResult: -32602 for the call, which does not run.
 * - A client that did not declare form-mode elicitation in `initialize` (`elicitation: {}` or
 *   `elicitation.form`): -32021 with `data.requiredCapabilities: {elicitation: {form: {}}}`, and
 *   nothing runs (fail closed).
 * - A listing of the upstream's tools (for their annotations) that fails fails the call; so does a
 *   shared store that cannot be reached (-32603 `store-unavailable`), except that an accept it
 *   cannot remember still runs (logged).
 * - A call waiting for its approval holds nothing else up: other messages go on at once. The
 *   client's `notifications/cancelled` for it withdraws it (the client is told `notifications/cancelled`
 *   for the gateway's form); the session closing ends the wait with nothing answered.
 * - Another request under the id of a call waiting for its approval is -32600 and goes nowhere
 *   (the id names the held call; relaying it would pass the approval).
 * - `RelayedRequest.approval` of the call says what happened (`accepted`, `remembered` on the real
 *   relay's record; `declined`, `cancelled` on the gateway's own).
 *
 * With a consent gate (src/router/consent-gate.ts) too, the gate stands outermost and this relay
 * inside it, in front of the relay the gate opens: the same order as a 2026-07-28 request, which
 * passes the credential gate before the approval gate (src/router/router.ts). The user is asked to
 * approve a call only once the caller's credential is there, so an approval is never spent on a
 * call that then cannot run, and this relay is opened again with each relay the gate opens.
 */
import { answerOwn, type OwnAnswer } from './relay-answer.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import type { ToolPolicyConfig } from '../config/globs.js';
import { ErrorCode, errorText, GatewayError, invalidParams, type JsonRpcErrorObject } from '../protocol/errors.js';
import type { ApprovalAudit } from '../protocol/connection.js';
import type { RequestId } from '../protocol/wire.js';
import type { Logger } from '../observability/log.js';
import { approvalAnswer, approvalRefusal, approvalRequest } from '../security/approval-form.js';
import { StoreUnavailable } from '../store/shared.js';
import { toolCallRefusal } from '../upstream/tool-policy.js';
import type { ClientMessageExtra, DownstreamTransport, LegacyRelay, RelayedRequest, RelayMessage } from '../upstream/legacy-relay.js';
import { answersForms, formRequired, type Approvals } from './approvals.js';
import type { RelayCaller } from './relays.js';

type Message = RelayMessage;

/** What an approval relay needs. */
export interface ApprovalRelayInit {
  /** The upstream's name (the policy's, and in the form and messages). */
  upstream: string;
  /** The session's caller: whose approvals are remembered, and who lists the upstream's tools when the policy must. */
  caller: RelayCaller;
  approvals: Pick<Approvals, 'needs' | 'remembered' | 'remember' | 'rememberMs' | 'saw'>;
  /** The upstream's `tools` policy: a call of a tool the gateway does not serve goes to the real relay unasked (it answers -32602). */
  tools?: ToolPolicyConfig;
  /** Longest wait for the client's answer to a form, in ms (`requestState.ttlMs`); then the call is answered as cancelled. */
  waitMs: number;
  /** The client's transport. */
  downstream: DownstreamTransport;
  log: Logger;
  /** Called once per request this relay answers itself, and (with its approval) for each the real relay answers. */
  onRequest?: (r: RelayedRequest) => void;
  /**
   * Opens the real relay, which sends to the client through `downstream` and reports each request it
   * answered to `onRequest` (with the request's `id`).
   */
  open(downstream: DownstreamTransport, onRequest: (r: RelayedRequest) => void): LegacyRelay;
}

/** A client `tools/call` the relay holds: its approval is being looked up or asked. */
interface Held {
  abort: AbortController;
}

/** What becomes of a held call: relayed (with what its approval was, if it needed one), or answered here. */
type Decision =
  { relay: true; approval?: ApprovalAudit } | { result: Record<string, unknown>; approval: ApprovalAudit } | { error: JsonRpcErrorObject };

let nextId = 1;

/** The revisions whose `elicitation/create` has no `mode` (form is all there is). */
const MODELESS = new Set(['2024-11-05', '2025-03-26', '2025-06-18']);

/** Approvals of one legacy session (see the file header). */
export class ApprovalRelay implements LegacyRelay {
  readonly kind: LegacyRelay['kind'];
  private readonly inner: LegacyRelay;
  /** The client's `initialize` params: its capabilities and requested revision. */
  private initialize: Record<string, unknown> | undefined;
  private readonly held = new Map<RequestId, Held>();
  /** The gateway's own forms to the client, by id: what takes the answer. */
  private readonly asks = new Map<RequestId, (m: Message | undefined) => void>();
  /** What the approval did for a call handed to the real relay, until its record comes. */
  private readonly approved = new Map<RequestId, ApprovalAudit>();
  /** Client `tools/list` requests without a cursor, whose complete answers tell the policy the tools' annotations. */
  private readonly listings = new Set<RequestId>();
  private closed = false;

  constructor(private readonly init: ApprovalRelayInit) {
    const down = init.downstream;
    const proxy: DownstreamTransport = {
      start: async () => {},
      close: async () => {},
      send: (message, options) => {
        this.toClient(message as Message);
        return down.send(message, options);
      },
      ...(down.hasStandaloneStream ? { hasStandaloneStream: () => down.hasStandaloneStream!() } : {}),
    };
    this.inner = init.open(proxy, (r) => this.annotated(r));
    this.kind = this.inner.kind;
  }

  /** Client requests waiting for their answer: in the real relay and held here. */
  get inFlight(): number {
    return this.inner.inFlight + this.held.size;
  }

  get negotiated(): string | undefined {
    return this.inner.negotiated;
  }

  get pid(): number | undefined {
    return this.inner.pid;
  }

  /** One message from the client; failures are answered, never thrown. */
  async fromClient(raw: JSONRPCMessage, extra?: ClientMessageExtra): Promise<void> {
    const m = raw as Message;
    if (this.closed) return;
    if (m.method === undefined) {
      const ask = m.id !== undefined ? this.asks.get(m.id) : undefined;
      if (ask) return ask(m);
      return this.inner.fromClient(raw, extra);
    }
    if (m.method === 'notifications/cancelled') {
      const cancelled = (m.params as { requestId?: RequestId } | undefined)?.requestId;
      const held = cancelled !== undefined ? this.held.get(cancelled) : undefined;
      if (held) return held.abort.abort();
      if (cancelled !== undefined) this.approved.delete(cancelled);
    }
    if (m.id !== undefined) {
      if (m.method === 'initialize') this.initialize = m.params ?? {};
      if (m.method === 'tools/list' && m.params?.cursor === undefined) this.listings.add(m.id);
      // The id of a call waiting for its approval names that call: another request under it is
      // refused, never relayed past the approval.
      if (this.held.has(m.id))
        return this.answer(
          m,
          {
            error: {
              code: ErrorCode.InvalidRequest,
              message: `Request id ${JSON.stringify(m.id)} is already in use by a call waiting for its approval`,
            },
          },
          performance.now(),
        );
      const tool = m.params?.name;
      if (m.method === 'tools/call' && typeof tool === 'string' && !toolCallRefusal(this.init.tools, tool))
        return this.gated(m, tool, extra);
    }
    return this.inner.fromClient(raw, extra);
  }

  /** A message of the real relay for the client: a complete `tools/list` answer tells the policy the annotations. */
  private toClient(m: Message): void {
    if (m.method !== undefined || m.id === undefined || !this.listings.delete(m.id)) return;
    const tools = m.result?.tools;
    if (Array.isArray(tools) && m.result?.nextCursor === undefined) this.init.approvals.saw(this.init.upstream, tools);
  }

  /** A `tools/call` of `tool`: looked up, asked if need be, then relayed or answered. */
  private async gated(m: Message, tool: string, extra: ClientMessageExtra | undefined): Promise<void> {
    const id = m.id!;
    const startedAt = performance.now();
    const abort = new AbortController();
    this.held.set(id, { abort });
    let outcome: Decision;
    try {
      outcome = await this.decide(m, tool, abort.signal);
    } catch (e) {
      outcome = { error: this.failed(e) };
    } finally {
      this.held.delete(id);
    }
    if (this.closed || abort.signal.aborted) return;
    if ('error' in outcome) return this.answer(m, { error: outcome.error }, startedAt);
    if ('result' in outcome) return this.answer(m, { result: outcome.result }, startedAt, outcome.approval);
    if (outcome.approval) this.approved.set(id, outcome.approval);
    return this.inner.fromClient(m as JSONRPCMessage, extra);
  }

  /** What becomes of call `m` of `tool`: relayed (with its approval), answered with a result, or an error. */
  private async decide(m: Message, tool: string, signal: AbortSignal): Promise<Decision> {
    const { approvals, upstream, caller, log } = this.init;
    const call = { principal: caller.principal, upstream, tool, args: m.params?.arguments };
    if (!(await approvals.needs(upstream, tool, caller))) return { relay: true };
    if (await approvals.remembered(call)) return { relay: true, approval: 'remembered' };
    if (!this.declaresForm()) {
      log.info({ tool }, 'legacy session: approval needed; the client has no form-mode elicitation: -32021');
      return {
        error: formRequired(tool, upstream, "this session's initialize capabilities").toJSON(),
      };
    }
    const answer = await this.ask(m.id!, this.form(tool, call.args), signal);
    // Withdrawn or closed: nothing is answered.
    if (signal.aborted || this.closed) return { relay: true };
    const choice = answer?.result ? this.read(answer.result) : { action: 'cancel' as const, remember: false };
    if (choice.action === 'accept') {
      // An accept the store cannot remember still runs (as for 2026-07-28 requests).
      if (choice.remember)
        await approvals
          .remember(call)
          .catch((e: unknown) => log.warn({ tool, err: errorText(e) }, 'approval not remembered: the store failed'));
      return { relay: true, approval: 'accepted' };
    }
    log.info({ tool, action: choice.action, answered: answer !== undefined }, 'legacy session: the call was not approved');
    const approval: ApprovalAudit = choice.action === 'decline' ? 'declined' : 'cancelled';
    return { result: approvalRefusal(choice.action, upstream, tool), approval };
  }

  /** The client's answer to a form. @throws GatewayError -32602 when it is not an ElicitResult. */
  private read(result: unknown): ReturnType<typeof approvalAnswer> {
    try {
      return approvalAnswer(result);
    } catch (e) {
      const why = errorText(e).replace(/^inputResponses\["approval"\] is not a valid ElicitResult: /, '');
      throw invalidParams(`The answer to the gateway's approval form (elicitation/create) is not a valid ElicitResult: ${why}`);
    }
  }

  /** The approval form's params for this session's revision: no `mode` before 2025-11-25. */
  private form(tool: string, args: unknown): Record<string, unknown> {
    const { upstream, approvals } = this.init;
    const params = { ...approvalRequest(upstream, tool, args, approvals.rememberMs(upstream)).params };
    if (MODELESS.has(this.negotiated ?? String(this.initialize?.protocolVersion ?? ''))) delete params.mode;
    return params;
  }

  /** Whether the client declared form-mode elicitation in `initialize` (plain `elicitation: {}`, or `elicitation.form`). */
  private declaresForm(): boolean {
    return answersForms((this.initialize?.capabilities ?? {}) as Record<string, unknown>);
  }

  /**
   * Sends `elicitation/create` with `params` on the stream of request `related`: the client's
   * response, or undefined (no answer within `waitMs`, withdrawn, the session closed). A form
   * given up while the session lives is withdrawn from the client with `notifications/cancelled`.
   */
  private ask(related: RequestId, params: Record<string, unknown>, signal: AbortSignal): Promise<Message | undefined> {
    const id = `gw-approval-${nextId++}`;
    const { downstream } = this.init;
    return new Promise((resolve) => {
      const done = (answer: Message | undefined) => {
        this.asks.delete(id);
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        if (!answer && !this.closed) {
          const cancelled = { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id, reason: 'no longer needed' } };
          void downstream.send(cancelled as JSONRPCMessage, { relatedRequestId: related }).catch(() => {});
        }
        resolve(answer);
      };
      const onAbort = () => done(undefined);
      const timer = setTimeout(onAbort, this.init.waitMs);
      signal.addEventListener('abort', onAbort, { once: true });
      this.asks.set(id, done);
      const request = { jsonrpc: '2.0', id, method: 'elicitation/create', params };
      downstream.send(request as JSONRPCMessage, { relatedRequestId: related }).catch(onAbort);
    });
  }

  /** The error answered for a call whose approval could not be decided (the listing, or the shared store, failed). */
  private failed(e: unknown): JsonRpcErrorObject {
    if (e instanceof GatewayError) return e.toJSON();
    const { log } = this.init;
    log.warn({ err: errorText(e) }, 'legacy session: the approval could not be decided; the call does not run');
    if (e instanceof StoreUnavailable)
      return {
        code: ErrorCode.InternalError,
        message: 'The shared store of the gateway cannot be reached; retry shortly',
        data: { reason: 'store-unavailable' },
      };
    return { code: ErrorCode.InternalError, message: 'Internal gateway error: the approval could not be decided; the call did not run' };
  }

  /** The real relay's record of a request, with the approval of a call this relay let through. */
  private annotated(r: RelayedRequest): void {
    const approval = r.id !== undefined ? this.approved.get(r.id) : undefined;
    if (r.id !== undefined) this.approved.delete(r.id);
    this.init.onRequest?.(approval ? { ...r, approval } : r);
  }

  /** Answers client request `m` itself (a result or an error), for the request log too. */
  private answer(m: Message, answer: OwnAnswer, startedAt: number, approval?: ApprovalAudit): Promise<void> {
    return answerOwn(this.init, m, answer, startedAt, approval);
  }

  /** Ends the relay: calls waiting for their approval end unanswered, and the real relay closes. Never throws. */
  async close(): Promise<void> {
    this.closed = true;
    for (const h of this.held.values()) h.abort.abort();
    for (const ask of [...this.asks.values()]) ask(undefined);
    await this.inner.close();
  }
}
