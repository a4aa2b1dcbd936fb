/**
 * The environment of a stdio upstream's child process. It gets:
 *
 * 1. the safe set ({@link SAFE_CHILD_ENV}) from the gateway's own environment;
 * 2. the variables of the gateway's environment its `envPassthrough` names (`GITHUB_TOKEN`) or
 *    matches by prefix (`AWS_*`);
 * 3. its configured `env`, which wins over both.
 *
 * Nothing else of the gateway's environment (its own secrets included) reaches a child.
 *
 * Its working directory is its `cwd` ({@link cwdProblem} says when that cannot be one).
 */
import { statSync } from 'node:fs';
import { bySize, redactText } from '../security/redact.js';

/**
 * Variables every stdio child gets from the gateway's environment when they are set. The SDK's
 * stdio transports add their own defaults (on Unix `HOME`, `LOGNAME`, `PATH`, `SHELL`, `TERM`,
 * `USER`), which this list contains. `NODE_OPTIONS` is left out: it carries the gateway's own Node
 * flags (`--inspect`, `--require`/`--import` of an agent, heap limits) into every Node child; an
 * upstream that needs it lists it in `envPassthrough` or sets it in `env`.
 */
export const SAFE_CHILD_ENV: readonly string[] =
  process.platform === 'win32'
    ? [
        'APPDATA',
        'COMSPEC',
        'HOMEDRIVE',
        'HOMEPATH',
        'LOCALAPPDATA',
        'PATH',
        'PATHEXT',
        'PROCESSOR_ARCHITECTURE',
        'PROGRAMDATA',
        'PROGRAMFILES',
        'PROGRAMFILES(X86)',
        'PROGRAMW6432',
        'SYSTEMDRIVE',
        'SYSTEMROOT',
        'TEMP',
        'USERNAME',
        'USERPROFILE',
        'WINDIR',
      ]
    : ['HOME', 'LOGNAME', 'PATH', 'SHELL', 'TERM', 'USER', 'LANG', 'TMPDIR'];

/** One `envPassthrough` entry: a variable name, or a name prefix followed by `*`. A bare `*` is not allowed. */
export const ENV_PASSTHROUGH_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*\*?$/;

const caseInsensitive = process.platform === 'win32';

/** True when variable `name` is matched by `pattern` (`NAME`, or `PREFIX*`). */
export function matchesPassthrough(name: string, pattern: string): boolean {
  const n = caseInsensitive ? name.toUpperCase() : name;
  const p = caseInsensitive ? pattern.toUpperCase() : pattern;
  return p.endsWith('*') ? n.startsWith(p.slice(0, -1)) : n === p;
}

/** The variables of `env` that `patterns` pass on, and the patterns that matched none. */
export function passthroughEnv(patterns: readonly string[], env: NodeJS.ProcessEnv): { values: Record<string, string>; unmatched: string[] } {
  const values: Record<string, string> = {};
  const unmatched: string[] = [];
  for (const pattern of patterns) {
    let hit = false;
    for (const [name, value] of Object.entries(env)) {
      if (value === undefined || !matchesPassthrough(name, pattern)) continue;
      values[name] = value;
      hit = true;
    }
    if (!hit) unmatched.push(pattern);
  }
  return { values, unmatched };
}

/** The safe set of `env`: the {@link SAFE_CHILD_ENV} variables that are set. */
export function safeChildEnv(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of SAFE_CHILD_ENV) if (env[k] !== undefined) out[k] = env[k]!;
  return out;
}

/**
 * Why `dir` cannot be a child's working directory (`does not exist: DIR`, `is not a directory:
 * DIR`), or undefined when it can. Checked at config load, and again when a child fails to spawn
 * (Node then reports `spawn COMMAND ENOENT`, as for a missing command).
 */
export function cwdProblem(dir: string): string | undefined {
  try {
    return statSync(dir).isDirectory() ? undefined : `the working directory ${dir} is not a directory`;
  } catch {
    return `the working directory ${dir} does not exist`;
  }
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
 * it failed without telling them the key. The safe set ({@link SAFE_CHILD_ENV}: `HOME`, `PATH` …)
 * is not hidden.
 */
export function secretRedactor(env: Record<string, string> | undefined): (text: string) => string {
  if (!env) return (text) => redactText(text, []);
  let made = redactors.get(env);
  if (!made) {
    const values = bySize(
      Object.entries(env)
        .filter(([name, v]) => !NOT_SECRET.test(v) && (v.length >= REDACT_MIN_CHARS || (v.length >= REDACT_SECRET_MIN_CHARS && SECRET_NAME.test(name))))
        .flatMap(([, v]) => encodings(v)),
    );
    made = (text) => redactText(text, values);
    redactors.set(env, made);
  }
  return made;
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
 * `value` and the forms a child commonly prints it in: base64 (padded or not) and base64url;
 * percent-encoded as JavaScript's `encodeURIComponent`, RFC 3986 (Go's `PathEscape`, Python's
 * `quote` with and without `/` kept) and HTML forms (`URLSearchParams`, Java's `URLEncoder`,
 * PHP's `urlencode`, Go's `QueryEscape`: `+` for a space), each with upper or lower case hex; and
 * JSON-escaped as JavaScript, Python (non-ASCII as `\uXXXX`), Go (`<`, `>`, `&`, U+2028 and U+2029
 * as `\u00XX`) and PHP (`\/`) write it, with upper or lower case hex.
 */
function encodings(given: string): string[] {
  // A lone surrogate cannot reach a child's output as itself: its UTF-8 form is U+FFFD.
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
  const escaped = [json, json.replace(/[^\x00-\x7f]/g, u), json.replace(/[<>&\u2028\u2029]/g, u), json.replace(/\//g, '\\/'), json.replace(/[^\x00-\x7f]/g, u).replace(/\//g, '\\/')];
  const jsonForms = escaped.flatMap((j) => [j, j.replace(/\\u[0-9a-f]{4}/g, (m) => `\\u${m.slice(2).toUpperCase()}`)]);
  return [...new Set([given, value, padded, b64, b64.replace(/\+/g, '-').replace(/\//g, '_'), ...urlForms, ...jsonForms])];
}

/** One redactor per configured `env` object (a session of the upstream is opened with the same one each time). */
const redactors = new WeakMap<Record<string, string>, (text: string) => string>();
