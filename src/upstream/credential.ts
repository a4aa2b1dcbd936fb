/**
 * What the gateway presents upstream for one caller (docs/security.md, "Upstream credentials"): the
 * value the router resolves per request (src/credentials) and the cells and the session pool use.
 * Types only.
 */

/**
 * The credential of one caller for one upstream: HTTP headers, or for a stdio upstream variables of
 * the child's environment. A static upstream (the same headers or env for everyone) has none.
 */
export interface UpstreamCredential {
  /**
   * Part of the pool key (a digest, never the token itself): upstream sessions and stdio children
   * are only reused by callers with the same key, so no session carries another user's token. A
   * new token (a refresh) gives a new key, and the old session is reaped when idle.
   */
  readonly key: string;
  /** Headers added to every upstream HTTP request, for example `authorization: Bearer …`. */
  readonly headers: Readonly<Record<string, string>>;
  /** stdio: variables added to the environment of the caller's own child. */
  readonly env: Readonly<Record<string, string>>;
}
