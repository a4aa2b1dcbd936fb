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

/**
 * `value` percent-encoded as UTF-8, every byte but ASCII letters, digits and `safe` as `%XX`
 * (upper case hex). Never throws (a lone surrogate is encoded as U+FFFD, as `Buffer` does).
 */
function percentEncoded(value: string, safe: string): string {
  let out = '';
  for (const byte of Buffer.from(value, 'utf8')) {
    const c = String.fromCharCode(byte);
    out += byte < 0x80 && (/[A-Za-z0-9]/.test(c) || safe.includes(c)) ? c : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/**
 * `value` and the forms a program commonly prints it in (a child's stderr, a provider's error
 * message): base64 (padded or not) and base64url;
 * percent-encoded as JavaScript's `encodeURIComponent`, RFC 3986 (Go's `PathEscape`, Python's
 * `quote` with and without `/` kept) and HTML forms (`URLSearchParams`, Java's `URLEncoder`,
 * PHP's `urlencode`, Go's `QueryEscape`: `+` for a space), each with upper or lower case hex; and
 * JSON-escaped as JavaScript, Python (non-ASCII as `\uXXXX`), Go (`<`, `>`, `&`, U+2028 and U+2029
 * as `\u00XX`) and PHP (`\/`) write it, with upper or lower case hex; hex, every byte
 * percent-encoded and every character `\uXXXX`-escaped; and its base64 inside a longer base64 text
 * (`user:KEY` in a Basic `Authorization` header).
 */
export function encodedForms(given: string): string[] {
  // A lone surrogate cannot reach printed text as itself: its UTF-8 form is U+FFFD.
  const value = Buffer.from(given, 'utf8').toString('utf8');
  const padded = Buffer.from(value, 'utf8').toString('base64');
  const b64 = padded.replace(/=+$/, '');
  const percent = [
    percentEncoded(value, "-_.!~*'()"),
    percentEncoded(value, '-_.~'),
    percentEncoded(value, '-_.~/'),
    ...['-_.*', '-_.', '-_.~'].map((safe) => percentEncoded(value, ` ${safe}`).replace(/ /g, '+')),
  ];
  const urlForms = percent.flatMap((p) => [p, p.replace(/%[0-9A-F]{2}/g, (m) => m.toLowerCase())]);
  const json = JSON.stringify(value).slice(1, -1);
  const u = (c: string) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;
  const escaped = [
    json,
    json.replace(/[^\x00-\x7f]/g, u),
    json.replace(/[<>&\u2028\u2029]/g, u),
    json.replace(/\//g, '\\/'),
    json.replace(/[^\x00-\x7f]/g, u).replace(/\//g, '\\/'),
  ];
  const jsonForms = escaped.flatMap((j) => [j, j.replace(/\\u[0-9a-f]{4}/g, (m) => `\\u${m.slice(2).toUpperCase()}`)]);
  const bytes = Buffer.from(value, 'utf8');
  const hex = bytes.toString('hex');
  const everyByte = hex.replace(/../g, (h) => `%${h}`);
  const everyChar = value.split('').map(u).join('');
  const whole = [hex, hex.toUpperCase(), everyByte, everyByte.toUpperCase(), everyChar, everyChar.toUpperCase().replace(/\\U/g, '\\u')];
  const inner = embeddedBase64(bytes).flatMap((f) => [f, f.replace(/\+/g, '-').replace(/\//g, '_')]);
  return [
    ...new Set([given, value, padded, b64, b64.replace(/\+/g, '-').replace(/\//g, '_'), ...urlForms, ...jsonForms, ...whole, ...inner]),
  ];
}

/**
 * The base64 characters that stand for `bytes` wherever they sit inside a longer base64 text (for
 * example `user:KEY` in an echoed Basic `Authorization` header): for each of the three positions
 * the value can start at within a 3-byte group, the run of characters that only its own bits
 * decide (the one or two characters shared with the bytes around it are left out). Each is at
 * least 4 × length / 3 − 3 characters long, so it names the value alone.
 */
function embeddedBase64(bytes: Buffer): string[] {
  const forms: string[] = [];
  for (let offset = 1; offset <= 2; offset++) {
    const encoded = Buffer.concat([Buffer.alloc(offset), bytes]).toString('base64');
    const start = Math.ceil((offset * 8) / 6);
    const end = Math.floor(((offset + bytes.length) * 8) / 6);
    if (end - start >= 8) forms.push(encoded.slice(start, end));
  }
  // At offset 0, only the characters decided by whole groups of the value, without its tail.
  const whole = Math.floor((bytes.length * 8) / 6);
  if (whole >= 8) forms.push(bytes.toString('base64').slice(0, whole));
  return forms;
}

/** Variable names that say their value is a credential: any value of theirs is hidden, however short. */
const SECRET_NAME = /KEY|TOKEN|SECRET|PASS|PWD|AUTH|CRED|PRIVATE|SESSION|COOKIE/i;
/** Values that are never hidden: blank, or a switch (`AUTH_ENABLED=true`, `COOKIE_SECURE=false`), which hiding would cut out of ordinary words. */
const NOT_SECRET = /^(?:\s*|true|false|yes|no|on|off|enabled|disabled)$/i;
/** Values at least this long (characters) are hidden whatever their variable is called. */
const REDACT_MIN_CHARS = 6;
/** Shorter values of secret-named variables are hidden from this length on (shorter ones would hide common words). */
const REDACT_SECRET_MIN_CHARS = 3;

/**
 * A function that hides, in a text a stdio child wrote (a stderr line, a stray stdout line),
 * every value of the child's configured `env` (the variables `envPassthrough` brought included):
 * values of at least 6 characters, and those of at least 3 of variables whose names say they are
 * credentials (`API_KEY`, `GITHUB_TOKEN`, `DB_PASSWORD` …), each also in base64, base64url,
 * percent-encoded and JSON-escaped form; and, as everywhere
 * ({@link redactText}), `Bearer …` credentials, `sk-…` style keys and URL passwords. Each becomes
 * `[redacted]`. A child that prints `auth failed with key sk-…` then tells callers and logs why
 * it failed without telling them the key. The safe set (`SAFE_CHILD_ENV` in
 * src/config/child-env.ts: `HOME`, `PATH` …) is not hidden.
 */
export function secretRedactor(env: Record<string, string> | undefined): (text: string) => string {
  if (!env) return (text) => redactText(text, []);
  let made = redactors.get(env);
  if (!made) {
    const values = bySize(
      Object.entries(env)
        .filter(
          ([name, v]) =>
            !NOT_SECRET.test(v) && (v.length >= REDACT_MIN_CHARS || (v.length >= REDACT_SECRET_MIN_CHARS && SECRET_NAME.test(name))),
        )
        .flatMap(([, v]) => encodedForms(v)),
    );
    made = (text) => redactText(text, values);
    redactors.set(env, made);
  }
  return made;
}

/** One redactor per configured `env` object (a session of the upstream is opened with the same one each time). */
const redactors = new WeakMap<Record<string, string>, (text: string) => string>();
