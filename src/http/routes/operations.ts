/**
 * The operations endpoints: `GET /healthz` (200 while the process serves), `GET /readyz` (200 when
 * every `required` upstream and the shared store are usable, 503 with the reasons otherwise, and
 * during the drain) and `GET /metrics` (Prometheus text). Other methods on them: 405 with `Allow: GET, HEAD`.
 * They sit outside the admission middleware: no authentication, no limits.
 */
import type { Hono } from 'hono';
import { ErrorCode } from '../../protocol/errors.js';
import type { AppEnv, Door } from '../door.js';
import { errorResponse } from '../sse.js';

/** Registers `/healthz`, `/readyz` and `/metrics` on `app`. */
export function operationsRoutes(app: Hono<AppEnv>, door: Door): void {
  app.get('/healthz', (c) => c.json({ status: 'ok' }));
  app.get('/readyz', async (c) => {
    const r = await door.readiness();
    return c.json({ ...r, ...(door.draining() ? { ready: false, reason: 'shutting down' } : {}) }, r.ready && !door.draining() ? 200 : 503);
  });
  app.get('/metrics', async () => {
    const { body, contentType } = await door.metrics.render();
    return new Response(body, { headers: { 'content-type': contentType } });
  });
  // Operations endpoints answer GET (and HEAD) only.
  for (const path of ['/healthz', '/readyz', '/metrics']) {
    app.all(path, (c) =>
      errorResponse(null, { code: ErrorCode.MethodNotFound, message: `${c.req.method} is not supported on ${path}; use GET` }, 405, {
        allow: 'GET, HEAD',
      }),
    );
  }
}
