/**
 * Per-caller upstream credentials in front of the cells, for 2026-07-28 requests (docs/security.md,
 * "Upstream credentials"). For an upstream whose credential depends on the caller
 * (`UpstreamCredentials.perCaller`), {@link CredentialGate.admit} resolves the caller's credential
 * before the request is routed and hands it to the cell in `CallContext.credential`. When the user
 * must first authorize an `oauth` upstream (`ConsentRequired`):
 *
 * - `tools/call`, `prompts/get`, `resources/read` (the only methods that may answer
 *   `input_required`) from a client that declared `elicitation.url`: a consent round,
 *   `{resultType: "input_required", inputRequests: {"authorization": {method: "elicitation/create",
 *   params: {mode: "url", message, url}}}, requestState}`, whose state is sealed by the gateway's
 *   `StateSealer` with the consent marker `cs`, bound like any state to principal, upstream, method,
 *   name and a digest of the arguments, valid `credentials.consentTtlMs`, single use. The retry is
 *   verified (a bad, expired, foreign or replayed state: -32602) and the credential resolved again:
 *   a grant now, and the call runs as a fresh call (with rounds of its own as usual); none (the
 *   user did not finish), a new consent round. When the user declined or cancelled, the answer is
 *   a tool result with `isError` for `tools/call`, and -32603 `upstream-authorization` for
 *   `prompts/get` and `resources/read`, so a client does not ask the user again in a loop.
 * - The same methods from a client without `elicitation.url`: -32021 (HTTP 400) with
 *   `data.requiredCapabilities: {elicitation: {url: {}}}`.
 * - `server/discover` is answered by the gateway: the official 2026-07-28 clients ask it when they
 *   connect and give up on an error, so the user could never be asked. It offers `tools` (to call
 *   one is how the user is asked) and says so in `instructions`; `ttlMs: 0`, `cacheScope: "private"`.
 * - Any other method (the lists, completion …): -32603 `upstream-authorization` saying to call a
 *   tool to be asked, with the consent link in `data.url`.
 *
 * A token endpoint or authorization server that fails surfaces as the -32603 `upstream-authorization`
 * the credentials raise. An upstream that refuses the credential (HTTP 401/403) has it dropped
 * ({@link CredentialGate.refusal}): the next call exchanges again, or asks for consent again.
 */
import { ElicitResultSchema } from '@modelcontextprotocol/core';
import { ConsentRequired, type UpstreamCredential, type UpstreamCredentials } from '../credentials/types.js';
import type { CallContext } from '../protocol/connection.js';
import type { ValidatedRequest } from '../protocol/envelope.js';
import { GatewayError, invalidParams, missingCapability, upstreamFailed } from '../protocol/errors.js';
import { EXCHANGE_METHODS, META_SERVER_INFO, SUPPORTED_VERSIONS } from '../protocol/wire.js';
import { digestOf, INVALID_STATE, type StateClaims, type StateSealer } from '../security/seal.js';
import { predatesLedger, type SpentStates } from '../store/shared.js';

/** The input key of a consent round. */
export const CONSENT_KEY = 'authorization';

/** What {@link CredentialGate.admit} decided: route `req` with `ctx` (the credential in it), or answer `answer` at once. */
export type Admission = { req: ValidatedRequest; ctx: CallContext; answer?: undefined } | { answer: Record<string, unknown> };

/** Resolves per-caller credentials and runs consent rounds (see the file header). */
export class CredentialGate {
  constructor(
    private readonly credentials: UpstreamCredentials,
    private readonly sealer: StateSealer,
    private readonly ledger: SpentStates,
    /** How long a consent round's state is valid, in ms (`credentials.consentTtlMs`). */
    private readonly ttlMs: number,
    /** Whether the credential of an upstream is one the gateway obtains (`tokenExchange`, `oauth`), not the caller's forwarded token. */
    private readonly obtained: (upstream: string) => boolean,
  ) {}

  /** Whether requests of `upstream` pass this gate. */
  applies(upstream: string): boolean {
    return this.credentials.perCaller(upstream);
  }

  /**
   * The request to route with the caller's credential in its context, or the answer of a consent round.
   * @throws GatewayError -32602 a bad, expired, foreign or replayed consent state; -32021 (HTTP 400)
   *   consent needed and the client did not declare `elicitation.url`; -32603 `upstream-authorization`
   *   (consent needed on a method that cannot ask, the user declined, or a token endpoint failed).
   */
  async admit(upstream: string, req: ValidatedRequest, ctx: CallContext): Promise<Admission> {
    const exchange = (EXCHANGE_METHODS as readonly string[]).includes(req.method);
    let declined: string | undefined;
    if (exchange && req.params.requestState !== undefined) {
      const claims = await this.sealer.open(req.params.requestState);
      if (claims.cs) {
        const action = consentAction(req.params.inputResponses);
        await this.spend(claims, upstream, req, ctx.principal);
        declined = action === 'decline' || action === 'cancel' ? action : undefined;
        const { requestState: _s, inputResponses: _i, ...params } = req.params;
        req = { ...req, params };
      }
    }
    try {
      const credential = await this.credentials.resolve(upstream, { principal: ctx.principal, token: ctx.token });
      return { req, ctx: { ...ctx, credential } };
    } catch (e) {
      if (!(e instanceof ConsentRequired)) throw e;
      if (req.method === 'server/discover') return { answer: discoverWithoutGrant(upstream, e) };
      if (!exchange) throw this.askFirst(upstream, e);
      if (declined) return { answer: this.declinedAnswer(upstream, req, declined) };
      const elicitation = (req.clientCapabilities as { elicitation?: { url?: unknown } }).elicitation;
      if (!elicitation?.url) {
        throw missingCapability(
          { elicitation: { url: {} } },
          'elicitation.url',
          undefined,
          `Upstream '${upstream}' needs your authorization, asked through a URL: that needs`,
        );
      }
      return { answer: await this.round(upstream, req, ctx.principal, e) };
    }
  }

  /** Whether the credential of `upstream` is the gateway's own to drop when the upstream refuses it (not a forwarded token). */
  owns(upstream: string): boolean {
    return this.obtained(upstream);
  }

  /**
   * What a request that cannot ask the user (a list, completion, `subscriptions/listen` …) gets
   * when the caller's credential cannot be had: -32603
   * `upstream-authorization` (with the consent link in `data.url` when the user must authorize
   * the upstream first), or the credentials' own error.
   */
  askFirst(upstream: string, e: unknown): unknown {
    if (!(e instanceof ConsentRequired)) return e;
    return upstreamFailed(
      upstream,
      'upstream-authorization',
      `Upstream '${upstream}' needs your authorization first: call one of its tools to be asked, or open data.url`,
      { url: e.url },
    );
  }

  /**
   * The upstream refused the credential of `principal` (HTTP 401/403): the gateway's token or
   * grant is dropped, and the caller gets -32603 `upstream-authorization`.
   */
  async refusal(upstream: string, principal: string, credential: UpstreamCredential, status: number): Promise<GatewayError> {
    await this.credentials.refused(upstream, principal, credential);
    const again = this.credentials.needsConsent(upstream)
      ? 'the next call asks for your authorization again'
      : 'the next call gets a new token';
    return upstreamFailed(upstream, 'upstream-authorization', `Upstream '${upstream}' refused the user's token (HTTP ${status}); ${again}`);
  }

  /** A consent round for `e` (see the file header). */
  private async round(upstream: string, req: ValidatedRequest, principal: string, e: ConsentRequired): Promise<Record<string, unknown>> {
    const claims: StateClaims = {
      ...binding(upstream, req, principal),
      ex: '',
      rep: '',
      rnd: 1,
      keys: [CONSENT_KEY],
      jti: crypto.randomUUID(),
      expMs: Date.now() + this.ttlMs,
      cs: true,
    };
    return {
      resultType: 'input_required',
      inputRequests: { [CONSENT_KEY]: { method: 'elicitation/create', params: { mode: 'url', message: e.message, url: e.url } } },
      requestState: await this.sealer.seal(claims),
    };
  }

  /** Checks a consent state's bindings and spends it. @throws GatewayError -32602 {@link INVALID_STATE}. */
  private async spend(claims: StateClaims, upstream: string, req: ValidatedRequest, principal: string): Promise<void> {
    const want = binding(upstream, req, principal);
    if (claims.up !== want.up || claims.sub !== want.sub || claims.m !== want.m || claims.n !== want.n || claims.d !== want.d)
      throw invalidParams(INVALID_STATE);
    if (predatesLedger(this.ledger, claims.iat) || !(await this.ledger.spend(claims.jti, claims.expMs))) throw invalidParams(INVALID_STATE);
  }

  /** The answer when the user declined or cancelled the consent round. */
  private declinedAnswer(upstream: string, req: ValidatedRequest, action: string): Record<string, unknown> {
    const text = `The user ${action === 'decline' ? 'declined' : 'cancelled'} authorizing upstream '${upstream}'; call again to be asked again`;
    if (req.method === 'tools/call') return { resultType: 'complete', content: [{ type: 'text', text }], isError: true };
    throw upstreamFailed(upstream, 'upstream-authorization', text);
  }
}

/** What a consent state is bound to. */
function binding(upstream: string, req: ValidatedRequest, principal: string): Pick<StateClaims, 'up' | 'sub' | 'm' | 'n' | 'd'> {
  const name = String(req.method === 'resources/read' ? req.params.uri : req.params.name);
  return { up: upstream, sub: principal, m: req.method, n: name, d: digestOf(req.params.arguments) };
}

/** The gateway's own `server/discover` answer for an upstream the caller has not authorized yet (see the file header). */
function discoverWithoutGrant(upstream: string, e: ConsentRequired): Record<string, unknown> {
  return {
    resultType: 'complete',
    supportedVersions: [...SUPPORTED_VERSIONS],
    capabilities: { tools: {} },
    instructions: `Upstream '${upstream}' needs your authorization before it can be used: call one of its tools to be asked, or open ${e.url}`,
    ttlMs: 0,
    cacheScope: 'private',
    _meta: { [META_SERVER_INFO]: { name: upstream, version: 'unknown' } },
  };
}

/**
 * The `action` of a retry's answer to the consent round (`inputResponses.authorization`), or
 * undefined when it is not answered (the round is asked again).
 * @throws GatewayError -32602 naming the key when the answer is not an `ElicitResult`.
 */
function consentAction(answers: unknown): string | undefined {
  if (!answers || typeof answers !== 'object' || !(CONSENT_KEY in answers)) return undefined;
  const r = ElicitResultSchema.safeParse((answers as Record<string, unknown>)[CONSENT_KEY]);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw invalidParams(
      `inputResponses["${CONSENT_KEY}"] is not a valid ElicitResult: ${i.path.length ? i.path.join('.') + ': ' : ''}${i.message}`,
      {
        key: CONSENT_KEY,
      },
    );
  }
  return r.data.action;
}
