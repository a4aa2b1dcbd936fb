/**
 * The `credentials` settings: how the gateway authenticates to an upstream on a caller's behalf
 * (docs/security.md, "Upstream credentials"). Per upstream, one mode:
 *
 * - `static` (the default): the upstream's `headers` (HTTP) or `env` (stdio), the same for everyone;
 *   with `forwardAuthorization` the caller's own token is sent on instead.
 * - `tokenExchange`: the caller's validated JWT is exchanged (RFC 8693) at `tokenEndpoint` for a
 *   token meant for the upstream (`audience` / `resource`), cached per principal until shortly
 *   before it expires.
 * - `oauth`: the user's own grant at the upstream's authorization server (authorization code with
 *   PKCE S256, RFC 6749 / RFC 7636), obtained through a URL-mode input request the first time.
 *
 * The top-level `credentials` section holds what all of them share: the keys that encrypt grants at
 * rest and seal the OAuth `state`, and the lifetime of a consent link.
 */
import { z } from 'zod';

const MAX_TIMER_MS = 2_147_483_647;
const positiveMs = (what: string) =>
  z.number().int().positive().max(MAX_TIMER_MS, 'at most 2147483647 ms').describe(`${what}, in milliseconds`);
const httpUrl = () => z.url({ protocol: /^https?$/, error: 'expected an http:// or https:// URL' });
const envName = () =>
  z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name (letters, digits, _)')
    .describe("stdio: the environment variable of the principal's child that carries the token (one child per principal)");

const StaticCredentialsSchema = z
  .object({ mode: z.literal('static') })
  .strict()
  .describe("The upstream's own headers or env, the same for every caller (forwardAuthorization sends the caller's token instead)");

const TokenExchangeSchema = z
  .object({
    mode: z.literal('tokenExchange'),
    tokenEndpoint: httpUrl().describe('Token endpoint that performs RFC 8693 token exchange'),
    clientId: z
      .string()
      .min(1)
      .optional()
      .describe('The gateway as an OAuth client of the token endpoint (client_secret_basic with clientSecret)'),
    clientSecret: z.string().min(1).optional().describe('Secret of clientId, normally ${NAME}; never logged'),
    audience: z.string().min(1).optional().describe('audience of the exchanged token (RFC 8693 §2.1)'),
    resource: httpUrl().optional().describe("resource of the exchanged token (RFC 8707); default: the upstream's url (HTTP upstreams)"),
    scope: z.string().min(1).optional().describe('scope asked for the exchanged token'),
    actorToken: z.string().min(1).optional().describe("The gateway's own token, sent as actor_token (type access_token), normally ${NAME}"),
    earlyRefreshMs: positiveMs('An exchanged token is used until this long before it expires').default(30_000),
    env: envName().optional(),
  })
  .strict()
  .describe("RFC 8693 token exchange: the caller's validated JWT is the subject_token (needs auth.mode jwt)");

const OAuthSchema = z
  .object({
    mode: z.literal('oauth'),
    clientId: z
      .string()
      .min(1)
      .optional()
      .describe('The registered client of the gateway at the authorization server; unset: dynamic client registration (RFC 7591)'),
    clientSecret: z.string().min(1).optional().describe('Secret of clientId (client_secret_basic); unset: a public client'),
    scopes: z.array(z.string().min(1)).optional().describe('Scopes asked; default: scopes_supported of the protected resource metadata'),
    authorizationServer: httpUrl()
      .optional()
      .describe("Issuer of the authorization server; unset: found from the upstream's 401 resource_metadata (RFC 9728)"),
    resource: httpUrl().optional().describe("The resource the tokens are for (RFC 8707); default: the upstream's url"),
    env: envName().optional(),
  })
  .strict()
  .describe("Each user's own grant (authorization code + PKCE S256), asked for through a URL-mode input request");

/** The per-upstream `credentials` setting (see the file header). */
export const UpstreamCredentialsSchema = z
  .discriminatedUnion('mode', [StaticCredentialsSchema, TokenExchangeSchema, OAuthSchema])
  .default({ mode: 'static' })
  .describe('How the gateway authenticates to this upstream: static (shared), tokenExchange (RFC 8693) or oauth (per-user grant)');

/** The top-level `credentials` section. */
export const CredentialsSectionSchema = z
  .object({
    keys: z
      .array(
        z
          .object({
            kid: z.string().min(1).max(64).describe('Key id'),
            secret: z.string().min(32, 'a credentials secret needs at least 32 characters').describe('Secret, normally ${NAME}'),
          })
          .strict(),
      )
      .default([])
      .describe(
        'Keys that encrypt stored grants and seal the OAuth state (first encrypts, every key decrypts). Empty: the requestState keys',
      ),
    consentTtlMs: positiveMs('How long a consent link (and the OAuth state behind it) stays valid').default(600_000),
    consentWaitMs: positiveMs(
      'How long a legacy client session waits, after the user accepted a URL-mode elicitation, for the consent to complete',
    ).default(300_000),
  })
  .strict()
  .prefault({})
  .describe('Per-user upstream credentials: grant encryption and consent links (docs/security.md)');

export type UpstreamCredentialsConfig = z.output<typeof UpstreamCredentialsSchema>;
export type CredentialsSection = z.output<typeof CredentialsSectionSchema>;

/**
 * The checks of an upstream's `credentials` that need the rest of the config: token exchange needs
 * the caller's JWT (`auth.mode: "jwt"`); a stdio upstream needs `env` (where its child gets the token) and,
 * with nothing to discover from, the audience or resource and the authorization server; per-user
 * credentials exclude `forwardAuthorization`.
 */
export function checkCredentials(
  name: string,
  u: { transport: string; credentials: UpstreamCredentialsConfig; forwardAuthorization?: boolean },
  authMode: string,
  ctx: z.core.$RefinementCtx,
): void {
  const c = u.credentials;
  if (c.mode === 'static') return;
  const path = ['upstreams', name, 'credentials'];
  const issue = (field: string, message: string) => ctx.addIssue({ code: 'custom', path: [...path, field], message });
  if (c.mode === 'tokenExchange' && authMode !== 'jwt')
    issue('mode', 'tokenExchange exchanges the caller\'s JWT: it needs auth.mode "jwt"');
  if (authMode === 'none' && c.mode === 'oauth')
    issue('mode', 'a per-user grant needs callers told apart: set auth.mode "apiKeys" or "jwt"');
  if (u.forwardAuthorization) issue('mode', `forwardAuthorization sends the caller's token; it cannot be combined with ${c.mode}`);
  if (u.transport === 'stdio') {
    if (!c.env) issue('env', 'a stdio upstream needs env: the variable its child reads the token from');
    if (c.mode === 'tokenExchange' && !c.audience && !c.resource) issue('audience', 'a stdio upstream needs audience or resource');
    if (c.mode === 'oauth' && !c.authorizationServer)
      issue('authorizationServer', 'a stdio upstream has no 401 to discover it from: set it');
    if (c.mode === 'oauth' && !c.resource) issue('resource', 'a stdio upstream needs the resource its tokens are for');
  } else if (c.env) issue('env', 'env is for stdio upstreams; an HTTP upstream gets Authorization: Bearer');
}
