/** RFC 8785 canonical JSON (the `canonicalize` package): argument digests in a sealed `requestState`, capability fingerprints of the session pool. */
import canonicalizeModule from 'canonicalize';

type Canonicalize = (input: unknown) => string | undefined;
const canonicalize: Canonicalize =
  (canonicalizeModule as unknown as { default?: Canonicalize }).default ?? (canonicalizeModule as unknown as Canonicalize);

/** RFC 8785 (JCS) canonical JSON of `value`, via the `canonicalize` package. */
export function canonicalJson(value: unknown): string {
  return canonicalize(value) ?? 'null';
}
