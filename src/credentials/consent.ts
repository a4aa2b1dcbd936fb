/**
 * The consent flow of `oauth` upstreams (docs/security.md, "Upstream credentials"), behind the
 * front door's routes (src/http/routes/credentials.ts):
 *
 * 1. The consent link: `<base>/oauth/start?link=SEALED`, the link sealed (src/security/sealed-box.ts)
 *    with the principal, the upstream and its expiry (`credentials.consentTtlMs`).
 * 2. {@link ConsentFlow.start}: opens the link, finds the authorization server and the client,
 *    makes a PKCE S256 verifier, a random browser cookie and a sealed single-use `state` (principal,
 *    upstream, expiry, verifier, client, redirect URI, the cookie's SHA-256), and gives the
 *    authorization URL (with `resource`, RFC 8707, and the scopes) to redirect to.
 * 3. {@link ConsentFlow.callback} at the one exact redirect URI `<base>/oauth/callback`: checks the
 *    state (genuine, current, unspent: spent in the shared ledger), the cookie (the browser that
 *    started the flow: a callback meant for another principal's browser fails here), the server's
 *    answer (`error=`), exchanges the code and stores the grant. Any failure stores nothing.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import * as oauth from 'oauth4webapi';
import type { GatewayConfig } from '../config/schema.js';
import type { Logger } from '../observability/log.js';
import { principalHash } from '../security/auth.js';
import type { SealedBox } from '../security/sealed-box.js';
import { StoreUnavailable, type SpentStates } from '../store/shared.js';
import type { GrantTokens } from './grants.js';
import { clientAuth, type OAuthClients } from './oauth-client.js';
import { oauthConfigOf, type OAuthDiscovery } from './oauth-discovery.js';
import { describeFailure, requestOptions } from './oauth-http.js';

/** The prefix of the consent cookie's name; the rest is the flow's id (so flows in one browser do not collide). */
export const CONSENT_COOKIE_PREFIX = 'mrtr_consent_';
/** The path of the start route and of the callback (the redirect URI is `<base>` + this). */
export const START_PATH = '/oauth/start';
export const CALLBACK_PATH = '/oauth/callback';

/** A consent step that cannot go on: the front door answers an HTML page with `status` and this message. */
export class ConsentProblem extends Error {
  override name = 'ConsentProblem';
  constructor(
    readonly status: 400 | 502 | 503,
    message: string,
    /** The consent cookie to clear, when known. */
    readonly cookie?: string,
  ) {
    super(message);
  }
}

/** What the start route answers: the redirect and the cookie to set (HttpOnly, SameSite=Lax, Path=/oauth). */
export interface ConsentStart {
  location: string;
  cookie: { name: string; value: string; maxAgeSec: number; secure: boolean };
}

interface LinkClaims {
  u: string;
  p: string;
  e: number;
}

interface StateClaims extends LinkClaims {
  /** PKCE verifier, client id, redirect URI, flow id, base64url SHA-256 of the cookie value. */
  v: string;
  cid: string;
  r: string;
  j: string;
  c: string;
}

/** What the flow is built from (see {@link OAuthGrants}, which builds it). */
export interface ConsentDeps {
  cfg: Pick<GatewayConfig, 'upstreams' | 'credentials'>;
  box: SealedBox;
  spent: SpentStates;
  discovery: OAuthDiscovery;
  clients: OAuthClients;
  log: Logger;
  baseUrl(): string | undefined;
  /** Stores the grant of a completed consent. */
  save(
    upstream: string,
    principal: string,
    tokens: Omit<GrantTokens, 'accessToken'>,
    response: oauth.TokenEndpointResponse,
  ): Promise<unknown>;
  /** Records a consent whose callback failed after its state passed (so a session waiting for the grant stops waiting). */
  failed(upstream: string, principal: string, why: string): Promise<void>;
}

const digest = (s: string) => createHash('sha256').update(s, 'utf8').digest('base64url');

/** The consent link, start and callback. */
export class ConsentFlow {
  constructor(private readonly deps: ConsentDeps) {}

  private base(upstream: string): string {
    const base = this.deps.baseUrl();
    if (!base) throw new ConsentProblem(503, `The gateway does not know its own URL yet (upstream ${upstream}): set http.publicUrl`);
    return base;
  }

  /**
   * The consent link of `principal` at `upstream`, valid `credentials.consentTtlMs`.
   * @throws ConsentProblem 503 when the gateway's URL is not known yet.
   */
  link(upstream: string, principal: string, elicitationId: string): string {
    const claims: LinkClaims & { i: string } = {
      u: upstream,
      p: principal,
      e: Date.now() + this.deps.cfg.credentials.consentTtlMs,
      i: elicitationId,
    };
    return `${this.base(upstream)}${START_PATH}?link=${encodeURIComponent(this.deps.box.seal(claims, 'consent-link'))}`;
  }

  /**
   * Opens `link` and prepares the redirect to the authorization server.
   * @throws ConsentProblem 400 for a link that is not genuine or has expired; 502 when the
   *   authorization server cannot be found or the client cannot be registered.
   * @throws StoreUnavailable when the shared store cannot be reached.
   */
  async start(link: string | undefined): Promise<ConsentStart> {
    const l = this.deps.box.open<LinkClaims>(link, 'consent-link');
    if (!l || typeof l.u !== 'string' || typeof l.p !== 'string' || typeof l.e !== 'number')
      throw new ConsentProblem(400, 'This consent link is not valid. Ask for a new one by calling the tool again from your MCP client.');
    if (l.e <= Date.now())
      throw new ConsentProblem(400, 'This consent link has expired. Ask for a new one by calling the tool again from your MCP client.');
    const upstream = l.u;
    const base = this.base(upstream);
    const redirectUri = `${base}${CALLBACK_PATH}`;
    let as: oauth.AuthorizationServer, resource: string, scopes: string[], clientId: string;
    try {
      const c = oauthConfigOf(this.deps.cfg, upstream);
      ({ as, resource, scopes } = await this.deps.discovery.target(upstream));
      clientId = (await this.deps.clients.forUpstream(upstream, c, { as, resource, scopes }, redirectUri)).client_id;
    } catch (e) {
      if (e instanceof StoreUnavailable) throw e;
      throw new ConsentProblem(502, (e as Error).message);
    }
    if (!as.authorization_endpoint)
      throw new ConsentProblem(502, `The authorization server ${as.issuer} of upstream ${upstream} has no authorization endpoint`);
    const verifier = oauth.generateRandomCodeVerifier();
    const cookieValue = randomBytes(32).toString('base64url');
    const flow = randomBytes(12).toString('base64url');
    const claims: StateClaims = {
      u: upstream,
      p: l.p,
      e: Date.now() + this.deps.cfg.credentials.consentTtlMs,
      v: verifier,
      cid: clientId,
      r: redirectUri,
      j: flow,
      c: digest(cookieValue),
    };
    const url = new URL(as.authorization_endpoint);
    const params: Record<string, string> = {
      response_type: 'code',
      client_id: clientId,
      redirect_uri: redirectUri,
      code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
      state: this.deps.box.seal(claims, 'oauth-state'),
      resource,
      ...(scopes.length ? { scope: scopes.join(' ') } : {}),
    };
    for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
    this.deps.log.info({ upstream, principal: principalHash(l.p) }, 'consent started: redirecting to the authorization server');
    return {
      location: url.href,
      cookie: {
        name: `${CONSENT_COOKIE_PREFIX}${flow}`,
        value: cookieValue,
        maxAgeSec: Math.ceil(this.deps.cfg.credentials.consentTtlMs / 1000),
        secure: base.startsWith('https:'),
      },
    };
  }

  /**
   * Completes a consent at the callback: checks the state, the browser's cookie and the server's
   * answer, exchanges the code and stores the grant.
   * @param params the callback's query parameters.
   * @param cookies the request's cookies by name.
   * @returns the upstream and the cookie to clear.
   * @throws ConsentProblem 400 naming the failed check or the code the server refused (nothing is
   *   stored); 502 when the token endpoint cannot be reached or answers unusably; 503 when the
   *   shared store cannot be reached.
   */
  async callback(
    params: URLSearchParams,
    cookies: Record<string, string>,
  ): Promise<{ upstream: string; principal: string; cookie: string }> {
    const s = this.deps.box.open<StateClaims>(params.get('state') ?? undefined, 'oauth-state');
    if (!s || typeof s.j !== 'string' || typeof s.c !== 'string')
      throw new ConsentProblem(
        400,
        'The sign-in response is not valid: its state is missing, forged or altered. Start again from your MCP client.',
      );
    const cookie = `${CONSENT_COOKIE_PREFIX}${s.j}`;
    const problem = (status: 400 | 503, message: string) => new ConsentProblem(status, message, cookie);
    if (s.e <= Date.now()) throw problem(400, 'This sign-in has expired. Start again from your MCP client.');
    const given = cookies[cookie];
    if (!given || !timingSafeEqual(Buffer.from(digest(given)), Buffer.from(s.c)))
      throw problem(
        400,
        'This sign-in was not started in this browser (its cookie is missing or does not match). Start again from your MCP client in this browser.',
      );
    let fresh: boolean;
    try {
      fresh = await this.deps.spent.spend(`oauth-state:${s.j}`, s.e);
    } catch (e) {
      throw problem(503, `The gateway cannot record the sign-in now: ${(e as Error).message}. Start again shortly.`);
    }
    if (!fresh) throw problem(400, 'This sign-in response was used already. Start again from your MCP client.');
    try {
      const error = params.get('error');
      if (error !== null) {
        const desc = params.get('error_description');
        const why = error === 'access_denied' ? 'access was denied' : `error ${error}`;
        throw problem(
          400,
          `The authorization server of ${s.u} did not grant access: ${why}${desc ? ` (${desc.slice(0, 200)})` : ''}. Nothing was stored.`,
        );
      }
      await this.exchange(s, params, cookie);
    } catch (e) {
      // This browser's own sign-in failed: a session waiting for the grant learns it at once.
      if (e instanceof ConsentProblem) await this.deps.failed(s.u, s.p, e.message);
      throw e;
    }
    this.deps.log.info({ upstream: s.u, principal: principalHash(s.p) }, 'consent completed: grant stored');
    return { upstream: s.u, principal: s.p, cookie };
  }

  /** Exchanges the callback's code (PKCE, the state's client and redirect URI) and stores the grant. */
  private async exchange(s: StateClaims, params: URLSearchParams, cookie: string): Promise<void> {
    const problem = (message: string) => new ConsentProblem(400, message, cookie);
    let response: oauth.TokenEndpointResponse;
    let target;
    try {
      const c = oauthConfigOf(this.deps.cfg, s.u);
      target = await this.deps.discovery.target(s.u);
      const client = await this.deps.clients.byId(s.u, c, s.cid);
      if (!client)
        throw problem("The gateway's client at the authorization server changed during this sign-in. Start again from your MCP client.");
      const { as } = target;
      let checked: URLSearchParams;
      try {
        checked = oauth.validateAuthResponse(as, client, params, params.get('state')!);
        if (params.getAll('code').length !== 1) throw new Error('it must carry exactly one "code"');
      } catch (e) {
        throw problem(`The sign-in response is not valid: ${(e as Error).message}. Nothing was stored; start again from your MCP client.`);
      }
      const res = await oauth.authorizationCodeGrantRequest(as, client, clientAuth(client), checked, s.r, s.v, {
        additionalParameters: { resource: target.resource },
        ...requestOptions(as.token_endpoint ?? as.issuer),
      });
      response = await oauth.processAuthorizationCodeResponse(as, client, res);
    } catch (e) {
      if (e instanceof ConsentProblem) throw e;
      const where = target?.as.token_endpoint ? `The token endpoint ${target.as.token_endpoint}` : `The authorization server of ${s.u}`;
      this.deps.log.warn({ upstream: s.u, principal: principalHash(s.p), err: describeFailure(where, e) }, 'consent code exchange failed');
      // The server refusing the code (4xx) is this sign-in's fault; a server down or answering garbage is a bad gateway.
      const status = e instanceof oauth.ResponseBodyError && e.status < 500 ? 400 : 502;
      throw new ConsentProblem(status, `${describeFailure(where, e)}. Nothing was stored; start again from your MCP client.`, cookie);
    }
    const { as, resource } = target;
    await this.deps.save(
      s.u,
      s.p,
      {
        issuer: as.issuer,
        tokenEndpoint: as.token_endpoint!,
        ...(as.revocation_endpoint ? { revocationEndpoint: as.revocation_endpoint } : {}),
        clientId: s.cid,
        resource,
      },
      response,
    );
  }
}
