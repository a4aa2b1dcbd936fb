/**
 * RFC 8693 token exchange on the test authorization server (test/helpers/oauth-server.ts):
 * registered on oidc-provider as a grant type.
 */
import { createLocalJWKSet, decodeJwt, jwtVerify, type JSONWebKeySet } from 'jose';
import { errors, type Provider } from 'oidc-provider';
import type { AuthServerRecords } from './oauth-server.js';

/** The RFC 8693 grant type. */
export const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
/** RFC 8693 `access_token` token type (the `issued_token_type` of an exchange). */
export const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
/** RFC 8693 `jwt` token type (a caller's JWT sent as `subject_token`). */
export const JWT_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:jwt';
/** The `subject_token_type` values the exchange accepts. */
const SUBJECT_TYPES = new Set([JWT_TOKEN_TYPE, ACCESS_TOKEN_TYPE, 'urn:ietf:params:oauth:token-type:id_token']);

/** Whose JWTs the token exchange accepts as `subject_token` (a {@link CallerIdp} fits). */
export interface SubjectIssuer {
  issuer: string;
  /** Public keys the subject tokens are signed with. */
  jwks: JSONWebKeySet;
  /** When set, the subject token's `aud` must contain it. */
  audience?: string;
}

/** One RFC 8693 exchange the token endpoint answered. */
export interface Exchange {
  clientId: string;
  /** The subject token's `sub` (the issued token's `sub`). */
  subject: string;
  /** The issued token's `aud` (the requested `audience`, else `resource`). */
  audience: string;
  /** The actor token's `sub` when one was sent and is a JWT. */
  actor?: string;
  scope?: string;
  atMs: number;
}

/**
 * RFC 8693 on `provider`: `subject_token` must be a JWT of `subjectIssuer` (signature, `iss`,
 * `exp`, `aud` when configured; `invalid_grant` otherwise) with a `subject_token_type` of `jwt`,
 * `access_token` or `id_token` (`invalid_request` otherwise); the issued token is a JWT signed with the provider's keys with
 * `sub` = the subject's `sub`, `aud` = `audience` (else `resource`), `exp` = now + `ttl`.
 */
export function registerTokenExchange(
  provider: Provider,
  c: { subjectIssuer?: SubjectIssuer; ttl: number; ownJwks: JSONWebKeySet; issuer: string; records: AuthServerRecords },
): void {
  const subjectKeys = c.subjectIssuer ? createLocalJWKSet(c.subjectIssuer.jwks) : undefined;
  const ownKeys = createLocalJWKSet(c.ownJwks);
  const params = [
    'subject_token',
    'subject_token_type',
    'actor_token',
    'actor_token_type',
    'audience',
    'resource',
    'scope',
    'requested_token_type',
  ];
  provider.registerGrantType(
    TOKEN_EXCHANGE,
    async (ctx: any) => {
      const p = ctx.oidc.params as Record<string, string | undefined>;
      if (!p.subject_token) throw new errors.InvalidRequest('missing required parameter subject_token');
      if (!p.subject_token_type || !SUBJECT_TYPES.has(p.subject_token_type)) {
        throw new errors.InvalidRequest(`subject_token_type must be one of ${[...SUBJECT_TYPES].join(', ')}`);
      }
      if (!subjectKeys || !c.subjectIssuer) throw new errors.InvalidGrant('no subject token issuer is trusted');
      const subject = await jwtVerify(p.subject_token, subjectKeys, {
        issuer: c.subjectIssuer.issuer,
        ...(c.subjectIssuer.audience ? { audience: c.subjectIssuer.audience } : {}),
      }).catch((e: Error) => {
        throw new errors.InvalidGrant(`subject_token invalid: ${e.message}`);
      });
      if (!subject.payload.sub) throw new errors.InvalidGrant('subject_token has no sub');
      let actor: string | undefined;
      if (p.actor_token) {
        const claims = await verifyActor(p.actor_token, subjectKeys, ownKeys, c);
        actor = claims?.sub;
      }
      const audience = p.audience ?? p.resource;
      if (!audience) throw new errors.InvalidTarget('audience or resource is required');
      const token = new provider.AccessToken({
        accountId: subject.payload.sub,
        client: ctx.oidc.client,
        gty: 'token_exchange',
        scope: p.scope,
      });
      token.resourceServer = { audience, accessTokenTTL: c.ttl, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'RS256' } } };
      // Read by the provider's extraTokenClaims (oauth-server.ts) while the token is saved.
      ctx.state.act = actor ? { sub: actor } : undefined;
      const value = await token.save();
      c.records.exchanges.push({
        clientId: ctx.oidc.client.clientId,
        subject: subject.payload.sub,
        audience,
        actor,
        scope: p.scope,
        atMs: Date.now(),
      });
      ctx.body = {
        access_token: value,
        issued_token_type: ACCESS_TOKEN_TYPE,
        token_type: 'Bearer',
        expires_in: token.expiration,
        ...(p.scope ? { scope: p.scope } : {}),
      };
    },
    params,
  );
}

/** The actor token's claims: a JWT of the subject issuer or of this server; an opaque one is accepted as is. */
async function verifyActor(
  token: string,
  subjectKeys: ReturnType<typeof createLocalJWKSet>,
  ownKeys: ReturnType<typeof createLocalJWKSet>,
  c: { subjectIssuer?: SubjectIssuer; issuer: string },
): Promise<{ sub?: string } | undefined> {
  try {
    decodeJwt(token);
  } catch {
    return undefined;
  }
  for (const [keys, issuer] of [
    [subjectKeys, c.subjectIssuer?.issuer],
    [ownKeys, c.issuer],
  ] as const) {
    const ok = await jwtVerify(token, keys, { issuer }).catch(() => undefined);
    if (ok) return ok.payload;
  }
  throw new errors.InvalidGrant('actor_token invalid');
}
