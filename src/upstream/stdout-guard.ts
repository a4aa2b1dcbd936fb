/**
 * A bound on what a stdio child may write to stdout that is not JSON-RPC (MCP basic/transports
 * §stdio: "The server MUST NOT write anything to its stdout that is not a valid MCP message").
 * A stray banner line is tolerated; a flood (a child that prints text in a loop, or one endless
 * line of text) fails the connection instead of costing the gateway CPU and memory while the SDK
 * parses every line.
 */
import { STDIO_DEFAULT_MAX_BUFFER_SIZE } from '@modelcontextprotocol/sdk/shared/stdio.js';

/** Lines in a row on stdout that cannot be JSON-RPC messages tolerated before the connection fails. */
export const MAX_NON_JSON_LINES = 1000;
/** Longest line of text (not starting with `{`) tolerated on stdout, in bytes. */
export const MAX_TEXT_LINE_BYTES = 1024 * 1024;

/** The line buffer both SDKs' `StdioClientTransport` keep in `_readBuffer` (v1 and v2 alike). */
interface ReadBufferLike {
  append(chunk: Buffer): void;
  readMessage(): unknown;
  clear(): void;
}

const NL = 0x0a;
/** Characters of the first stray line kept to quote (its first 80 are shown once hidden). */
const FIRST_KEPT = 400;
/** Bytes a JSON-RPC line may start with: `{`, or whitespace before it. */
const JSON_START = new Set([0x7b, 0x20, 0x09, 0x0d]);

/** What a guard saw on stdout that is not JSON-RPC: lines dropped so far, and the first of them (at most 80 characters, values of the child's `env` hidden). */
export interface StdoutStrays {
  readonly lines: number;
  readonly first: string;
}

/** The sentence naming stray stdout lines, for a start that failed or timed out (undefined when there were none). */
export function straysText(strays: StdoutStrays | undefined): string | undefined {
  if (!strays?.lines) return undefined;
  return `the process wrote ${strays.lines} line(s) on stdout that are not MCP messages (the first: ${JSON.stringify(strays.first)}); stdout must carry only MCP messages, logs go to stderr`;
}

/**
 * Wraps the stdout line buffer of `transport` (a v1 or v2 SDK `StdioClientTransport`, before its
 * `start()`): lines that cannot be a JSON-RPC message (they do not start with `{`) are dropped
 * before the SDK parses them, and counted. Once {@link MAX_NON_JSON_LINES} came in a row (a
 * message in between resets the count), or one grew past {@link MAX_TEXT_LINE_BYTES}, or a message
 * grew past the SDK's `STDIO_DEFAULT_MAX_BUFFER_SIZE` (10 MiB; both SDKs read no more), the rest of the output is dropped unread and
 * `onFlood` is called once with a message saying so. `redact` hides the values of the child's
 * `env` in the stray line quoted. Returns the live count of stray lines ({@link StdoutStrays}).
 */
export function guardStdout(transport: object, onFlood: (message: string) => void, redact: (text: string) => string): StdoutStrays {
  /** The first stray line as read so far (raw), and whether more of it may come. */
  let first = '';
  let firstOpen = false;
  let lines = 0;
  const strays: StdoutStrays = {
    get lines() {
      return lines;
    },
    get first() {
      return redact(first.trimEnd()).slice(0, 80);
    },
  };
  const holder = transport as { _readBuffer?: ReadBufferLike };
  const inner = holder._readBuffer;
  if (!inner) return strays;
  /** What the current line is: undecided at its start, JSON (handed on), or text (dropped). */
  let line: 'start' | 'json' | 'text' = 'start';
  let textBytes = 0;
  let bad = 0;
  let flooded = false;
  const stop = (message: string) => {
    flooded = true;
    inner.clear();
    onFlood(message);
  };
  const flood = (what: string) =>
    stop(
      `the process wrote ${what} on stdout (the first: ${JSON.stringify(strays.first)}); stdout must carry only MCP messages, logs go to stderr`,
    );
  holder._readBuffer = {
    append(chunk) {
      let from = 0;
      // The start of the JSON lines of this chunk not handed on yet: they go to the SDK's buffer
      // in one piece (each append there copies the buffer).
      let run = -1;
      const flush = (to: number) => {
        if (run >= 0 && to > run) {
          try {
            inner.append(chunk.subarray(run, to));
          } catch (e) {
            // The SDK's buffer refuses a message past its bound (and would end the connection as if the child had gone).
            if (!/exceeded maximum size/i.test((e as Error).message)) throw e;
            stop(
              `the process wrote a message of more than ${STDIO_DEFAULT_MAX_BUFFER_SIZE} bytes on stdout, the largest a stdio message may be`,
            );
          }
        }
        run = -1;
      };
      while (!flooded && from < chunk.length) {
        if (line === 'start') {
          if (chunk[from] === NL) {
            flush(from);
            from++;
            continue;
          }
          line = JSON_START.has(chunk[from]!) ? 'json' : 'text';
          if (line === 'text') {
            flush(from);
            if (lines++ === 0) firstOpen = true;
          }
        }
        const nl = chunk.indexOf(NL, from);
        const end = nl < 0 ? chunk.length : nl + 1;
        // The first stray line is kept whole up to FIRST_KEPT characters, across chunks, and shown hidden and cut.
        if (line === 'text' && firstOpen) {
          first += chunk.toString('utf8', from, Math.min(nl < 0 ? chunk.length : nl, from + FIRST_KEPT - first.length));
          if (nl >= 0 || first.length >= FIRST_KEPT) firstOpen = false;
        }
        if (line === 'json') {
          if (run < 0) run = from;
          if (nl >= 0) bad = 0;
        } else {
          textBytes += end - from;
          if (nl >= 0) bad++;
          if (textBytes > MAX_TEXT_LINE_BYTES) flood(`a line of more than ${MAX_TEXT_LINE_BYTES} bytes that is not a JSON-RPC message`);
          else if (bad >= MAX_NON_JSON_LINES) flood(`${MAX_NON_JSON_LINES} lines in a row that are not JSON-RPC messages`);
        }
        if (nl >= 0) {
          line = 'start';
          textBytes = 0;
        }
        from = end;
      }
      if (!flooded) flush(from);
    },
    readMessage() {
      return flooded ? null : inner.readMessage();
    },
    clear() {
      inner.clear();
    },
  };
  return strays;
}
