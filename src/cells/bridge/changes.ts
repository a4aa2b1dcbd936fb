/**
 * The change signal of one Exchange (input asked, answer given, progress, outcome): one-shot
 * waiters (a front end waiting in {@link Exchange.settle}) and standing listeners (a task syncing
 * its status). A parked call keeps its Exchange for minutes, so both sets are made on first use.
 */
import type { ClientConnection } from '../../protocol/connection.js';

/** Waiters and listeners of one Exchange's changes. */
export class Changes {
  private waiters: Set<() => void> | undefined;
  private listeners: Set<() => void> | undefined;

  /** Calls `listener` on every change; returns an unsubscribe function. */
  listen(listener: () => void): () => void {
    const listeners = (this.listeners ??= new Set());
    listeners.add(listener);
    return () => listeners.delete(listener);
  }

  /** Something changed: wakes every waiter (once) and calls every listener. */
  notify(): void {
    const ws = this.waiters;
    this.waiters = undefined;
    for (const w of ws ?? []) w();
    for (const l of this.listeners ?? []) l();
  }

  /** Resolves on the next change, after `timeoutMs` (ms), or when `connection` closes. */
  next(timeoutMs: number | undefined, connection?: ClientConnection): Promise<void> {
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      let stopWatching: (() => void) | undefined;
      const done = () => {
        clearTimeout(timer);
        stopWatching?.();
        this.waiters?.delete(done);
        resolve();
      };
      (this.waiters ??= new Set()).add(done);
      if (timeoutMs !== undefined) timer = setTimeout(done, timeoutMs);
      stopWatching = connection?.onClose(done);
    });
  }
}
