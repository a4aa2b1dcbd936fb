/**
 * Requests to paths the gateway does not serve (the front door's 404s: no route, or `/mcp/NAME`
 * of an upstream that is not configured), logged at `info` with the paths it does serve, so that a
 * client pointed at the wrong URL (`/mcp` instead of `/mcp/NAME`) shows in the log. Each path is
 * logged once (the last {@link REMEMBERED} paths are remembered), and at most {@link PER_MINUTE}
 * lines a minute in all, so a scanner cannot flood the log; the next line logged counts the
 * requests left out (`notLogged`).
 */
import { LRUCache } from 'lru-cache';
import type { Logger } from '../observability/log.js';

/** Distinct paths remembered as logged. */
const REMEMBERED = 1_000;
/** Most lines logged per minute. */
const PER_MINUTE = 10;
/** A path longer than this is logged cut to it, in characters. */
const MAX_PATH_CHARS = 200;

export class UnknownPaths {
  private readonly logged = new LRUCache<string, true>({ max: REMEMBERED });
  private windowStart = 0;
  private inWindow = 0;
  private notLogged = 0;

  /** @param served the paths the gateway serves (`/mcp/NAME`, and `/mcp` with federation), for the hint. */
  constructor(
    private readonly log: Logger,
    private readonly served: () => string[],
  ) {}

  /** Notes one 404 of `method path`; logs it unless this path was logged already or the minute's lines are used up. */
  note(method: string, path: string, now = Date.now()): void {
    const shown = path.length > MAX_PATH_CHARS ? `${path.slice(0, MAX_PATH_CHARS)}…` : path;
    if (this.logged.has(shown)) return;
    if (now - this.windowStart >= 60_000) {
      this.windowStart = now;
      this.inWindow = 0;
    }
    if (this.inWindow >= PER_MINUTE) {
      this.notLogged++;
      return;
    }
    this.inWindow++;
    this.logged.set(shown, true);
    const served = this.served();
    const line: Record<string, unknown> = { method, path: shown, status: 404, served };
    if (this.notLogged) line.notLogged = this.notLogged;
    this.notLogged = 0;
    this.log.info(line, `no endpoint at ${shown} (404); this gateway serves ${served.join(', ')}; each path is logged once`);
  }
}
