/**
 * RFC 9728 protected resource metadata: `GET /.well-known/oauth-protected-resource/mcp/NAME` for
 * each upstream, and `…/mcp` for the federated endpoint with `federation.enabled`. It names the
 * resource's URL, the authorization servers and scopes of `auth`. The URL is built from Host when
 * `http.publicUrl` is not set, so only an allowed Host gets it (403 otherwise), and the answer varies by Host.
 */
import type { Context, Hono, MiddlewareHandler } from 'hono';
import type { AppEnv, Door } from '../door.js';
import { headerOf } from '../headers.js';
import { unknownUpstream } from '../refusals.js';

/** Registers the metadata endpoints (and their Host check) on `app`; the CORS middleware is registered before. */
export function metadataRoutes(app: Hono<AppEnv>, door: Door): void {
  const { router, federation, guard, auth, baseUrl } = door;
  // The metadata names URLs built from Host when http.publicUrl is not set: only an allowed Host
  // gets it, so a forged Host cannot make the gateway advertise another resource.
  const metadataHost: MiddlewareHandler = async (c, next) => {
    const refused = guard.check(headerOf(c, 'host'), undefined);
    if (refused) return door.forbidden(refused, {}, { vary: 'Host' });
    await next();
    // Whether the answer is the metadata or a 403 depends on Host, whatever publicUrl says.
    c.header('vary', 'Host', { append: true });
  };
  const metadata = (c: Context, resource: string, name: string) => ({
    resource: `${baseUrl(c)}${resource}`,
    ...(auth.authorizationServers.length ? { authorization_servers: auth.authorizationServers } : {}),
    bearer_methods_supported: ['header'],
    ...(auth.scopes.length ? { scopes_supported: auth.scopes } : {}),
    resource_name: name,
  });
  app.use('/.well-known/oauth-protected-resource/mcp/:name', metadataHost);
  if (federation) app.use('/.well-known/oauth-protected-resource/mcp', metadataHost);
  app.get('/.well-known/oauth-protected-resource/mcp/:name', (c) => {
    const name = c.req.param('name');
    if (!router.upstreams.has(name)) return unknownUpstream(c, router.upstreams.keys(), name, null);
    return c.json(metadata(c, `/mcp/${name}`, `mrtr-gateway upstream ${name}`));
  });
  if (federation) {
    app.get('/.well-known/oauth-protected-resource/mcp', (c) => c.json(metadata(c, '/mcp', 'mrtr-gateway federated upstreams')));
  }
}
