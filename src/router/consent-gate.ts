/**
 * The consent gate of a legacy client session (2024-11-05 … 2025-11-25) on an upstream whose
 * credential depends on the caller (tokenExchange, oauth, forwardAuthorization; see
 * src/router/relays.ts). It stands in front of the session's real relay (the legacy pass-through or
 * the reverse bridge) and opens it only once the caller's credential is resolved
 * (`UpstreamCredentials.resolve`), so the upstream side never starts without it.
 *
 * - `initialize`: the credential is resolved. When it is, the real relay opens with it and the
 *   client's `initialize` goes on as it is. When it is not (an `oauth` upstream without the user's
 *   grant: `ConsentRequired`; or a token endpoint that fails), the gate answers `initialize`
 *   itself (the client's revision when it is a legacy one, else the newest; `tools`, `prompts`,
 *   `resources`; `serverInfo` naming the upstream) and swallows `notifications/initialized`.
 * - The next request resolves again. On `ConsentRequired`, a client that declared
 *   `elicitation.url` gets `elicitation/create` `{mode: "url", message, url, elicitationId}` on
 *   that request's stream; on `accept` the gate waits for the grant (at most
 *   `credentials.consentWaitMs`, or until the consent fails at the callback), sends
 *   `notifications/elicitation/complete`, opens the real relay
 *   with the credential, replays the client's `initialize` upstream (its answer is not relayed; then
 *   `notifications/initialized`) and relays the request. `decline`, `cancel`, an error or no grant
 *   in time: the request gets -32603 `upstream-authorization`, and the next request asks again. A
 *   client that did not declare url mode gets -32042 (URLElicitationRequired, 2025-11-25) with
 *   `data.elicitations`; its retry after the user consented goes through. A failing token endpoint
 *   gives the request its -32603 `upstream-authorization`; the next request tries again.
 * - While the gate resolves, asks or opens, the client's other messages wait in order (a
 *   `notifications/cancelled` of one of them withdraws it); `ping` is answered at once, and
 *   responses to the gate's own requests are taken at once.
 * - The upstream refuses the credential later (HTTP 401 or 403: expired, revoked): the refused
 *   request gets -32603 `upstream-authorization`, `credentials.refused` drops the token or grant,
 *   and the upstream side is closed (requests still in flight on it get the same error). The
 *   session stays: the next request resolves again, so it asks for consent again or gets a new
 *   token. A refused `initialize` leaves the gate answering it as above.
 *
 * When the gate answered `initialize`, the upstream may negotiate an older revision at the replay;
 * the session keeps the revision the gate answered (`negotiated`), which the upstream side's
 * transport does not see.
 */
import { answerOwn, type OwnAnswer } from './relay-answer.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { LEGACY_REVISIONS } from '../config/schema.js';
import { ConsentRequired, type CredentialCaller, type UpstreamCredentials } from '../credentials/types.js';
import { ErrorCode, errorText, GatewayError, upstreamFailed, type JsonRpcErrorObject } from '../protocol/errors.js';
import type { RequestId } from '../protocol/wire.js';
import type { Logger } from '../observability/log.js';
import type { UpstreamCredential } from '../upstream/credential.js';
import { URL_ELICITATION_REQUIRED } from '../upstream/failures.js';
import type { ClientMessageExtra, DownstreamTransport, LegacyRelay, RelayedRequest, RelayMessage } from '../upstream/legacy-relay.js';

type Message = RelayMessage;

/** Called by the real relay when the upstream refused the credential on client request `id`; true: the gate answers it. */
export type RefusalHook = (id: RequestId, method: string, status: number) => boolean;

/** What a consent gate needs. */
export interface ConsentGateInit {
  upstream: string;
  /** The kind of the relay it opens. */
  kind: LegacyRelay['kind'];
  /** The session's caller: its principal and bearer token. */
  caller: CredentialCaller;
  credentials: Pick<UpstreamCredentials, 'resolve' | 'refused' | 'waitForGrant'>;
  /** How long the gate waits for the client's answer to its `elicitation/create`, then for the grant, in ms each. */
  consentWaitMs: number;
  /** The client's transport. */
  downstream: DownstreamTransport;
  log: Logger;
  /** Called for each request the gate answers itself (the request log line and metrics). */
  onRequest?: (r: RelayedRequest) => void;
  /**
   * Opens the real relay with the caller's credential (undefined: none). It sends to the client
   * through `downstream` and reports refusals of the credential to `onRefused`.
   */
  open(credential: UpstreamCredential | undefined, downstream: DownstreamTransport, onRefused: RefusalHook): LegacyRelay;
}

type Resolved = { credential: UpstreamCredential | undefined } | { consent: ConsentRequired } | { error: GatewayError };

let nextId = 1;

/** The consent gate of one legacy session (see the file header). */
export class ConsentGate implements LegacyRelay {
  readonly kind: LegacyRelay['kind'];
  /** The real relay, once open. */
  private relay: LegacyRelay | undefined;
  /** The client's `initialize`, replayed upstream when the relay opens after the gate answered it. */
  private initialize: Message | undefined;
  /** The revision the gate answered `initialize` with. */
  private answered: string | undefined;
  /** Client messages waiting while the gate works, in order. */
  private readonly queue: { m: Message; extra?: ClientMessageExtra }[] = [];
  private working = false;
  /** The request the gate is opening the relay for. */
  private pending: { id: RequestId; abort: AbortController } | undefined;
  /** The gate's own requests to the client (`elicitation/create`), by id. */
  private readonly asks = new Map<RequestId, (m: Message) => void>();
  /** The replayed `initialize`, whose answer is not relayed. */
  private replay: { id: RequestId; answered: (m: Message) => void } | undefined;
  /** Client requests given to the relay and not answered yet: their methods. */
  private readonly forwarded = new Map<RequestId, string>();
  /** The handling of a refusal, which the next gated message waits for. */
  private settling: Promise<void> | undefined;
  private closed = false;
  /** The client's transport as the relay sees it: the answer of a replayed `initialize` stops here. */
  private readonly proxy: DownstreamTransport;

  constructor(private readonly init: ConsentGateInit) {
    this.kind = init.kind;
    const down = init.downstream;
    this.proxy = {
      start: async () => {},
      close: async () => {},
      send: (message, options) => this.toClient(message as Message, () => down.send(message, options)),
      ...(down.hasStandaloneStream ? { hasStandaloneStream: () => down.hasStandaloneStream!() } : {}),
    };
  }

  /** Client requests waiting for their answer: in the relay, at the gate and queued. */
  get inFlight(): number {
    const queued = this.queue.filter(({ m }) => m.id !== undefined && m.method !== undefined).length;
    return (this.relay?.inFlight ?? 0) + (this.pending ? 1 : 0) + queued;
  }

  get negotiated(): string | undefined {
    return this.answered ?? this.relay?.negotiated;
  }

  get pid(): number | undefined {
    return this.relay?.pid;
  }

  /** One message from the client; failures are answered, never thrown. */
  async fromClient(raw: JSONRPCMessage, extra?: ClientMessageExtra): Promise<void> {
    const m = raw as Message;
    if (this.closed) return;
    if (m.method === undefined) {
      const ask = m.id !== undefined ? this.asks.get(m.id) : undefined;
      if (ask) return ask(m);
      return this.relay?.fromClient(raw, extra);
    }
    if (m.method === 'notifications/cancelled' && this.withdraw((m.params as { requestId?: RequestId } | undefined)?.requestId)) return;
    if (!this.relay && m.method === 'ping' && m.id !== undefined) return this.answer(m, { result: {} });
    if (this.relay && !this.working && this.queue.length === 0) return this.forward(m, extra);
    this.queue.push({ m, extra });
    if (this.working) return;
    this.working = true;
    try {
      while (this.queue.length > 0 && !this.closed) {
        const next = this.queue.shift()!;
        if (!this.relay) await this.settling;
        if (this.relay) void this.forward(next.m, next.extra);
        else await this.gated(next.m, next.extra);
      }
    } finally {
      this.working = false;
    }
  }

  /** Withdraws the client request `id` the gate holds (cancelled by the client); false when it holds none. */
  private withdraw(id: RequestId | undefined): boolean {
    if (id === undefined) return false;
    if (this.pending?.id === id) {
      this.pending.abort.abort();
      return true;
    }
    const i = this.queue.findIndex(({ m }) => m.id === id && m.method !== undefined);
    if (i >= 0) this.queue.splice(i, 1);
    return i >= 0;
  }

  /** A client message while no relay is open. */
  private async gated(m: Message, extra: ClientMessageExtra | undefined): Promise<void> {
    // Notifications (`notifications/initialized` among them) have no upstream side to go to yet.
    if (m.id === undefined) return;
    if (m.method === 'initialize') {
      if (this.initialize)
        return this.answer(m, { error: { code: ErrorCode.InvalidRequest, message: 'The session is already initialized' } });
      return this.opening(m, extra);
    }
    if (!this.initialize)
      return this.answer(m, {
        error: { code: ErrorCode.InvalidRequest, message: 'The session is not initialized; send initialize first' },
      });
    return this.admit(m, extra);
  }

  /** The client's `initialize`: the relay opens with the credential, or the gate answers it. */
  private async opening(m: Message, extra: ClientMessageExtra | undefined): Promise<void> {
    this.initialize = m;
    const r = await this.resolve();
    if (this.closed) return;
    if ('credential' in r) {
      this.relay = this.open(r.credential);
      return this.forward(m, extra);
    }
    if ('error' in r) this.init.log.warn({ err: r.error.message }, 'legacy session: no credential for the upstream yet');
    else this.init.log.info('legacy session: the user has not consented yet; the gateway answers initialize');
    return this.answerInitialize();
  }

  /** A request of a session whose relay is not open: resolve (ask for consent), open, relay. */
  private async admit(m: Message, extra: ClientMessageExtra | undefined): Promise<void> {
    const startedAt = performance.now();
    const abort = new AbortController();
    this.pending = { id: m.id!, abort };
    try {
      let r = await this.resolve();
      if ('consent' in r) r = await this.consent(m, r.consent, abort.signal);
      if (this.closed || abort.signal.aborted) return;
      if ('consent' in r) return this.answer(m, { error: this.notGiven('no grant').toJSON() }, startedAt);
      if ('error' in r) return this.answer(m, { error: r.error.toJSON() }, startedAt);
      const failed = await this.openReplaying(r.credential);
      if (this.closed || abort.signal.aborted) return;
      if (failed) return this.answer(m, { error: failed }, startedAt);
      void this.forward(m, extra);
    } finally {
      this.pending = undefined;
    }
  }

  /** The caller's credential, the consent it needs, or why it cannot be had. */
  private async resolve(): Promise<Resolved> {
    const { upstream, caller } = this.init;
    try {
      return { credential: await this.init.credentials.resolve(upstream, caller) };
    } catch (e) {
      if (e instanceof ConsentRequired) return { consent: e };
      if (e instanceof GatewayError) return { error: e };
      const why = `The credential for upstream '${upstream}' could not be obtained: ${errorText(e)}`;
      return { error: upstreamFailed(upstream, 'upstream-authorization', why) };
    }
  }

  /**
   * Asks the user's consent for request `m`: url-mode `elicitation/create`, then the grant; or
   * -32042 for a client without url mode.
   */
  private async consent(m: Message, c: ConsentRequired, signal: AbortSignal): Promise<Resolved> {
    const { upstream, caller, credentials, consentWaitMs } = this.init;
    const elicitation = { mode: 'url', message: c.message, url: c.url, elicitationId: c.elicitationId };
    if (!this.declaresUrlMode()) {
      this.init.log.info('legacy session: consent needed; the client has no url-mode elicitation: -32042');
      return { error: new GatewayError(URL_ELICITATION_REQUIRED, c.message, { elicitations: [elicitation] }) };
    }
    this.init.log.info('legacy session: consent needed; asking the client (url-mode elicitation)');
    const asked = Date.now();
    const action = await this.ask(m.id!, elicitation, signal);
    if (action !== 'accept') return { error: this.notGiven(action ? `the user chose ${action}` : 'no answer from the client') };
    const waited = await credentials.waitForGrant(upstream, caller.principal, consentWaitMs, signal, asked);
    if (!waited.granted) return { error: this.notGiven(waited.why) };
    const complete = { jsonrpc: '2.0', method: 'notifications/elicitation/complete', params: { elicitationId: c.elicitationId } };
    await this.init.downstream.send(complete as JSONRPCMessage, { relatedRequestId: m.id }).catch(() => {});
    const r = await this.resolve();
    return 'consent' in r ? { error: this.notGiven('the grant was not usable') } : r;
  }

  /** -32603 `upstream-authorization`: the user's consent was not given. */
  private notGiven(why: string): GatewayError {
    const { upstream } = this.init;
    return upstreamFailed(
      upstream,
      'upstream-authorization',
      `Consent for upstream '${upstream}' was not given (${why}); the next request asks again`,
    );
  }

  /** Whether the client declared url-mode elicitation (2025-11-25) in its `initialize`. */
  private declaresUrlMode(): boolean {
    const caps = this.initialize?.params?.capabilities as { elicitation?: { url?: unknown } } | undefined;
    return caps?.elicitation?.url !== undefined;
  }

  /** Sends `elicitation/create` to the client on the stream of request `related`: its `action`, or undefined (error, no answer in time, cancelled). */
  private ask(related: RequestId, params: Record<string, unknown>, signal: AbortSignal): Promise<string | undefined> {
    const id = `gw-consent-${nextId++}`;
    return new Promise((resolve) => {
      const done = (action: string | undefined) => {
        this.asks.delete(id);
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        resolve(action);
      };
      const onAbort = () => done(undefined);
      const timer = setTimeout(onAbort, this.init.consentWaitMs);
      signal.addEventListener('abort', onAbort, { once: true });
      this.asks.set(id, (answer) => done(typeof answer.result?.action === 'string' ? answer.result.action : undefined));
      const request = { jsonrpc: '2.0', id, method: 'elicitation/create', params };
      this.init.downstream.send(request as JSONRPCMessage, { relatedRequestId: related }).catch(onAbort);
    });
  }

  /** Opens the relay with `credential` and replays the client's `initialize` on it; the error when that failed. */
  private async openReplaying(credential: UpstreamCredential | undefined): Promise<JsonRpcErrorObject | undefined> {
    const relay = this.open(credential);
    this.relay = relay;
    const id = `gw-initialize-${nextId++}`;
    const answer = await new Promise<Message>((answered) => {
      this.replay = { id, answered };
      void relay.fromClient({ ...this.initialize!, id } as JSONRPCMessage);
    });
    this.replay = undefined;
    if (answer.error) {
      if (this.relay === relay) this.relay = undefined;
      await relay.close();
      return answer.error;
    }
    await relay.fromClient({ jsonrpc: '2.0', method: 'notifications/initialized' } as JSONRPCMessage);
    return undefined;
  }

  /** Hands client message `m` to the relay. */
  private forward(m: Message, extra: ClientMessageExtra | undefined): Promise<void> {
    if (m.id !== undefined) this.forwarded.set(m.id, m.method!);
    return this.relay!.fromClient(m as JSONRPCMessage, extra);
  }

  /** A message of the relay for the client: the answer of the replayed `initialize` stops here. */
  private toClient(m: Message, send: () => Promise<void>): Promise<void> {
    if (m.method === undefined && m.id !== undefined) {
      if (this.replay?.id === m.id) return Promise.resolve(this.replay.answered(m));
      this.forwarded.delete(m.id);
    }
    return send();
  }

  /** The real relay with `credential`, its refusals reported to {@link onRefused}. */
  private open(credential: UpstreamCredential | undefined): LegacyRelay {
    const opened: { relay?: LegacyRelay } = {};
    opened.relay = this.init.open(credential, this.proxy, (id, method, status) =>
      this.onRefused(opened.relay, credential, id, method, status),
    );
    return opened.relay;
  }

  /**
   * `relay` reports that the upstream refused the credential on client request `id` (see the file
   * header); true: the gate answers it (an `initialize`). A relay already given up answers its own.
   */
  private onRefused(
    relay: LegacyRelay | undefined,
    credential: UpstreamCredential | undefined,
    id: RequestId,
    method: string,
    status: number,
  ): boolean {
    if (!relay || relay !== this.relay) return false;
    this.relay = undefined;
    const initialize = method === 'initialize';
    this.settling = this.refused(relay, credential, id, status, initialize);
    return initialize;
  }

  /** After a refusal: the token or grant is dropped, the upstream side closes, and an `initialize` is answered. */
  private async refused(
    relay: LegacyRelay,
    credential: UpstreamCredential | undefined,
    id: RequestId,
    status: number,
    initialize: boolean,
  ): Promise<void> {
    const { upstream, caller, log } = this.init;
    log.info({ status }, 'legacy session: the upstream refused the credential; its upstream side closes');
    // The refused request is answered by the relay first (or, for an initialize, below).
    await Promise.resolve();
    const orphaned = [...this.forwarded].filter(([f]) => f !== id);
    this.forwarded.clear();
    if (credential)
      await this.init.credentials.refused(upstream, caller.principal, credential).catch((e: unknown) => {
        log.warn({ err: errorText(e) }, 'legacy session: the refused credential could not be dropped');
      });
    const error = upstreamFailed(
      upstream,
      'upstream-authorization',
      `Upstream '${upstream}' refused the caller's credential (HTTP ${status}); the next request gets a new one`,
    ).toJSON();
    for (const [o, method] of orphaned) await this.answer({ jsonrpc: '2.0', id: o, method }, { error });
    if (initialize && this.replay?.id === id) this.replay.answered({ jsonrpc: '2.0', id, error });
    else if (initialize) await this.answerInitialize();
    await relay.close();
  }

  /** The gate's own answer to the client's `initialize`. */
  private answerInitialize(): Promise<void> {
    const m = this.initialize!;
    const requested = String(m.params?.protocolVersion ?? '');
    const known = (LEGACY_REVISIONS as readonly string[]).includes(requested);
    this.answered = known ? requested : LEGACY_REVISIONS[LEGACY_REVISIONS.length - 1];
    const result = {
      protocolVersion: this.answered,
      capabilities: { tools: {}, prompts: {}, resources: {} },
      serverInfo: { name: this.init.upstream, version: 'unknown' },
    };
    return this.answer(m, { result });
  }

  /** Answers client request `m` itself (a result or an error), for the request log too. */
  private answer(m: Message, answer: OwnAnswer, startedAt = performance.now()): Promise<void> {
    return answerOwn(this.init, m, answer, startedAt);
  }

  /** Ends the gate: a pending consent ends, and the relay closes. Never throws. */
  async close(): Promise<void> {
    this.closed = true;
    this.queue.length = 0;
    this.pending?.abort.abort();
    const closed: Message = { jsonrpc: '2.0', error: { code: ErrorCode.InternalError, message: 'session closed' } };
    for (const ask of [...this.asks.values()]) ask(closed);
    this.replay?.answered(closed);
    const relay = this.relay;
    this.relay = undefined;
    await relay?.close();
  }
}
