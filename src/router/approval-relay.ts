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
 * - A call waiting for its approval holds nothing else up: other messages go on at once. The
 *   client's `notifications/cancelled` for it withdraws it (the client is told `notifications/cancelled`
 *   for the gateway's form); the session closing ends the wait with nothing answered.
 * - `RelayedRequest.approval` of the call says what happened (`accepted`, `remembered` on the real
 *   relay's record; `declined`, `cancelled` on the gateway's own).
 *
 * With a consent gate (src/router/consent-gate.ts) too, the gate stands outermost and this relay
 * inside it, in front of the relay the gate opens: the same order as a 2026-07-28 request, which
 * passes the credential gate before the approval gate (src/router/router.ts). The user is asked to
 * approve a call only once the caller's credential is there, so an approval is never spent on a
 * call that then cannot run, and this relay is opened again with each relay the gate opens.
 */
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { ErrorCode, GatewayError, missingCapability, type JsonRpcErrorObject } from '../protocol/errors.js';
import type { ApprovalAudit } from '../protocol/connection.js';
import type { RequestId } from '../protocol/wire.js';
import type { Logger } from '../observability/log.js';
import type { InputRequest } from '../protocol/wire.js';
import type { ClientMessageExtra, DownstreamTransport, LegacyRelay, RelayedRequest, RelayMessage } from '../upstream/legacy-relay.js';

type Message = RelayMessage;

/** The user's answer to an approval form, as `approvalAnswer` reads it. */
export interface ApprovalChoice {
  action: 'accept' | 'decline' | 'cancel';
  remember: boolean;
}

/** The approval policy of one upstream for one caller, as this relay uses it (built on `Approvals`, src/router/approvals.ts). */
export interface ApprovalPort {
  /** Whether a `tools/call` of `tool` needs the user's approval. @throws GatewayError when that cannot be known (the call is answered with it). */
  needs(tool: string): Promise<boolean>;
  /** Whether the caller's accept of `tool` with exactly `args` is remembered. */
  remembered(tool: string, args: unknown): Promise<boolean>;
  /** Remembers the caller's accept of `tool` with exactly `args` for `rememberMs`. */
  remember(tool: string, args: unknown): Promise<void>;
  /** The form to send (`{method: 'elicitation/create', params: {mode: 'form', message, requestedSchema}}`). */
  request(tool: string, args: unknown): InputRequest;
  /** The client's answer read. @throws GatewayError -32602 when `result` is not an ElicitResult. */
  answer(result: unknown): ApprovalChoice;
  /** The `isError` tool result of a call the user declined or cancelled. */
  refusal(action: 'decline' | 'cancel', tool: string): Record<string, unknown>;
}

/** What an approval relay needs. */
export interface ApprovalRelayInit {
  /** The upstream's name, in messages. */
  upstream: string;
  policy: ApprovalPort;
  /** Whether the gateway serves `tool` at all: the real relay answers a call of one it does not (-32602) without asking. */
  served(tool: string): boolean;
  /** Longest wait for the client's answer to a form, in ms (`requestState.ttlMs`); then the call is answered as cancelled. */
  waitMs: number;
  /** The client's transport. */
  downstream: DownstreamTransport;
  log: Logger;
  /** Called once per request this relay answers itself, and (annotated) for each the real relay answers. */
  onRequest?: (r: RelayedRequest) => void;
  /** Opens the real relay, which reports each request it answered to `onRequest` (with the request's `id`). */
  open(onRequest: (r: RelayedRequest) => void): LegacyRelay;
}

/** A client `tools/call` the relay holds: its approval is being looked up or asked. */
interface Held {
  abort: AbortController;
}

/** What becomes of a held call: relayed (with what its approval was, if it needed one), or answered here. */
type Decision =
  | { relay: true; approval?: ApprovalAudit }
  | { result: Record<string, unknown>; approval: ApprovalAudit }
  | { error: JsonRpcErrorObject };

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
  private closed = false;

  constructor(private readonly init: ApprovalRelayInit) {
    this.inner = init.open((r) => this.annotated(r));
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
    if (m.method === 'initialize' && m.id !== undefined) this.initialize = m.params ?? {};
    const name = m.params?.name;
    if (m.method === 'tools/call' && m.id !== undefined && typeof name === 'string' && this.init.served(name) && !this.held.has(m.id)) {
      return this.gated(m, name, extra);
    }
    return this.inner.fromClient(raw, extra);
  }

  /** A `tools/call` of `tool`: looked up, asked if need be, then relayed or answered. */
  private async gated(m: Message, tool: string, extra: ClientMessageExtra | undefined): Promise<void> {
    const id = m.id!;
    const startedAt = performance.now();
    const abort = new AbortController();
    this.held.set(id, { abort });
    const args = m.params?.arguments ?? {};
    let outcome: Decision;
    try {
      outcome = await this.decide(m, tool, args, abort.signal);
    } catch (e) {
      outcome = { error: asGatewayError(e).toJSON() };
    } finally {
      this.held.delete(id);
    }
    if (this.closed || abort.signal.aborted) return;
    if ('error' in outcome) return this.answer(m, { error: outcome.error }, startedAt);
    if ('result' in outcome) return this.answer(m, { result: outcome.result }, startedAt, outcome.approval);
    if (outcome.approval) this.approved.set(id, outcome.approval);
    return this.inner.fromClient(m as JSONRPCMessage, extra);
  }

  /** What happens to call `m` of `tool` with `args`: relayed (with its approval), answered with a result, or an error. */
  private async decide(
    m: Message,
    tool: string,
    args: unknown,
    signal: AbortSignal,
  ): Promise<Decision> {
    const { policy, upstream, log } = this.init;
    if (!(await policy.needs(tool))) return { relay: true };
    if (await policy.remembered(tool, args)) return { relay: true, approval: 'remembered' };
    if (!this.declaresForm()) {
      log.info({ tool }, 'legacy session: approval needed; the client has no form-mode elicitation: -32021');
      return {
        error: missingCapability(
          { elicitation: { form: {} } },
          'elicitation (form mode)',
          "this session's initialize capabilities",
          `Tool '${tool}' of upstream '${upstream}' needs the user's approval: the gateway asks it with`,
        ).toJSON(),
      };
    }
    const answer = await this.ask(m.id!, this.form(tool, args), signal);
    // Withdrawn or closed: the caller answers nothing.
    if (signal.aborted || this.closed) return { relay: true };
    const choice: ApprovalChoice = answer?.result ? policy.answer(answer.result) : { action: 'cancel', remember: false };
    if (choice.action === 'accept') {
      if (choice.remember) await policy.remember(tool, args);
      return { relay: true, approval: 'accepted' };
    }
    log.info({ tool, action: choice.action, answered: answer !== undefined }, 'legacy session: the call was not approved');
    return { result: policy.refusal(choice.action, tool), approval: choice.action === 'decline' ? 'declined' : 'cancelled' };
  }

  /** The approval form's params for this session's revision: no `mode` before 2025-11-25. */
  private form(tool: string, args: unknown): Record<string, unknown> {
    const params = { ...this.init.policy.request(tool, args).params };
    if (MODELESS.has(this.negotiated ?? String(this.initialize?.protocolVersion ?? ''))) delete params.mode;
    return params;
  }

  /** Whether the client declared form-mode elicitation in `initialize` (plain `elicitation: {}`, or `elicitation.form`). */
  private declaresForm(): boolean {
    const caps = this.initialize?.capabilities as { elicitation?: { form?: unknown; url?: unknown } } | undefined;
    const e = caps?.elicitation;
    return e !== undefined && e !== null && typeof e === 'object' && (e.form !== undefined || e.url === undefined);
  }

  /**
   * Sends `elicitation/create` with `params` on the stream of request `related`: the client's
   * response, or undefined (no answer within `waitMs`, withdrawn, the session closed). A form
   * that is given up is withdrawn from the client with `notifications/cancelled`.
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

  /** The real relay's record of a request, with the approval of a call this relay let through. */
  private annotated(r: RelayedRequest): void {
    const approval = r.id !== undefined ? this.approved.get(r.id) : undefined;
    if (r.id !== undefined) this.approved.delete(r.id);
    this.init.onRequest?.(approval ? { ...r, approval } : r);
  }

  /** Answers client request `m` itself (a result or an error), for the request log too. */
  private async answer(
    m: Message,
    answer: { result: Record<string, unknown> } | { error: JsonRpcErrorObject },
    startedAt: number,
    approval?: ApprovalAudit,
  ): Promise<void> {
    const error = 'error' in answer ? answer.error : undefined;
    this.init.onRequest?.({
      method: m.method!,
      name: typeof m.params?.name === 'string' ? m.params.name : undefined,
      durationMs: performance.now() - startedAt,
      outcome: error ? 'error' : 'complete',
      ...(error ? { code: error.code } : {}),
      ...(approval ? { approval } : {}),
    });
    await this.init.downstream.send({ jsonrpc: '2.0', id: m.id!, ...answer } as JSONRPCMessage).catch(() => {});
  }

  /** Ends the relay: waits for approvals end unanswered, and the real relay closes. Never throws. */
  async close(): Promise<void> {
    this.closed = true;
    for (const h of this.held.values()) h.abort.abort();
    for (const ask of [...this.asks.values()]) ask(undefined);
    await this.inner.close();
  }
}

/** `e` as a GatewayError (-32603 for anything else). */
function asGatewayError(e: unknown): GatewayError {
  if (e instanceof GatewayError) return e;
  return new GatewayError(ErrorCode.InternalError, `The approval could not be decided: ${(e as Error)?.message ?? String(e)}`);
}
