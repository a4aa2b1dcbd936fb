/**
 * One way to hide secrets in text that leaves the gateway (error messages, a stdio child's
 * stderr, the admin page, a sampling provider's error): known secret values, and text shaped like
 * a credential whatever it is.
 */

/** What stands in for a hidden secret. */
export const REDACTED = '[redacted]';

/**
 * `text` with every one of `secrets` (tried longest first, so a secret that contains another goes
 * whole) replaced with `[redacted]`, and so `Bearer …` and `Basic …` credentials, `sk-…`/`pk-…`/
 * `rk-…` style API keys and the password of a URL's user info.
 * @param secrets values to hide, sorted longest first by the caller (see {@link bySize}).
 */
export function redactText(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) if (out.includes(s)) out = out.split(s).join(REDACTED);
  return out
    .replace(/\b(Bearer|Basic)\s+[A-Za-z0-9\-._~+/=]+/gi, `$1 ${REDACTED}`)
    .replace(/\b(sk|pk|rk)-[A-Za-z0-9_*.-]{6,}/g, REDACTED)
    .replace(/(\/\/[^/\s:@]+):[^/\s@]+@/g, `$1:${REDACTED}@`);
}

/** `values` without duplicates and empty strings, longest first (the order {@link redactText} wants). */
export function bySize(values: Iterable<string>): string[] {
  return [...new Set([...values].filter(Boolean))].sort((a, b) => b.length - a.length);
}
