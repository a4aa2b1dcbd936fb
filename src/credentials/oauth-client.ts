/**
 * The gateway as an OAuth client of an `oauth` upstream's authorization server: the configured
 * `credentials.clientId` (and `clientSecret`), or a client registered dynamically (RFC 7591) with
 * the one exact redirect URI `<base>/oauth/callback`. A registered client is kept in the shared
 * store, its secret sealed, so every replica uses the same one (the callback may land on any).
 */
import * as oauth from 'oauth4webapi';
import type { Logger } from '../observability/log.js';
import type { SealedBox } from '../security/sealed-box.js';
import type { GrantStore } from '../store/grants.js';
import { authorizationFailed, describeFailure, requestOptions } from './oauth-http.js';
import type { AuthorizationTarget, OAuthConfig } from './oauth-discovery.js';

/** A client of an authorization server, with the secret when it has one. */
export interface OAuthClient extends oauth.Client {
  client_secret?: string;
  /** The redirect URI it was registered with (registered clients only). */
  redirect_uri?: string;
  token_endpoint_auth_method?: string;
}

/** oauth4webapi's client authentication for `client`: client_secret_basic (or _post when registered so), else none. */
export function clientAuth(client: OAuthClient): oauth.ClientAuth {
  if (!client.client_secret) return oauth.None();
  return client.token_endpoint_auth_method === 'client_secret_post'
    ? oauth.ClientSecretPost(client.client_secret)
    : oauth.ClientSecretBasic(client.client_secret);
}

/** The clients of the `oauth` upstreams: configured, or registered once and shared through the store. */
export class OAuthClients {
  private readonly registering = new Map<string, Promise<OAuthClient>>();

  constructor(
    private readonly store: GrantStore,
    private readonly box: SealedBox,
    private readonly log: Logger,
  ) {}

  /**
   * The client for `upstream` with `redirectUri`: the configured one, else the registered one
   * (registering it, or again when the redirect URI changed).
   * @throws GatewayError -32603 upstream-authorization when no clientId is configured and the
   *   server offers no registration, or the registration fails.
   */
  async forUpstream(upstream: string, c: OAuthConfig, target: AuthorizationTarget, redirectUri: string): Promise<OAuthClient> {
    if (c.clientId) return { client_id: c.clientId, ...(c.clientSecret ? { client_secret: c.clientSecret } : {}) };
    const stored = await this.stored(upstream);
    if (stored?.redirect_uri === redirectUri) return stored;
    let running = this.registering.get(upstream);
    if (!running) {
      running = this.register(upstream, target, redirectUri, stored !== undefined).finally(() => this.registering.delete(upstream));
      this.registering.set(upstream, running);
    }
    return running;
  }

  /** The client with `clientId` for `upstream` (configured or registered), or undefined when it is neither any more. */
  async byId(upstream: string, c: OAuthConfig, clientId: string): Promise<OAuthClient | undefined> {
    if (c.clientId)
      return c.clientId === clientId ? { client_id: c.clientId, ...(c.clientSecret ? { client_secret: c.clientSecret } : {}) } : undefined;
    const stored = await this.stored(upstream);
    return stored?.client_id === clientId ? stored : undefined;
  }

  private async stored(upstream: string): Promise<OAuthClient | undefined> {
    const sealed = await this.store.client(upstream);
    return sealed === undefined ? undefined : this.box.open<OAuthClient>(sealed, `oauth-client\n${upstream}`);
  }

  private async register(upstream: string, target: AuthorizationTarget, redirectUri: string, replace: boolean): Promise<OAuthClient> {
    const { as } = target;
    if (!as.registration_endpoint)
      throw authorizationFailed(
        upstream,
        `The authorization server ${as.issuer} of upstream ${upstream} offers no dynamic client registration: register the gateway there (redirect URI ${redirectUri}) and set credentials.clientId`,
      );
    let registered: oauth.OmitSymbolProperties<oauth.Client>;
    try {
      const res = await oauth.dynamicClientRegistrationRequest(
        as,
        {
          client_name: 'mrtr-gateway',
          redirect_uris: [redirectUri],
          grant_types: ['authorization_code', 'refresh_token'],
          response_types: ['code'],
          token_endpoint_auth_method: 'client_secret_basic',
        },
        requestOptions(as.registration_endpoint),
      );
      registered = await oauth.processDynamicClientRegistrationResponse(res);
    } catch (e) {
      throw authorizationFailed(
        upstream,
        describeFailure(`The client registration endpoint ${as.registration_endpoint} (upstream ${upstream})`, e),
      );
    }
    const client: OAuthClient = {
      client_id: registered.client_id,
      ...(typeof registered.client_secret === 'string' ? { client_secret: registered.client_secret } : {}),
      ...(typeof registered.token_endpoint_auth_method === 'string'
        ? { token_endpoint_auth_method: registered.token_endpoint_auth_method }
        : {}),
      redirect_uri: redirectUri,
    };
    const kept = await this.store.putClient(upstream, this.box.seal(client, `oauth-client\n${upstream}`), replace);
    this.log.info({ upstream, issuer: as.issuer }, 'registered the gateway as an OAuth client (RFC 7591)');
    return this.box.open<OAuthClient>(kept, `oauth-client\n${upstream}`) ?? client;
  }
}
