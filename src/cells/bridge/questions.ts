/**
 * The questions of one Exchange run: the `inputRequests` key each input request gets, and in replay
 * mode (`ExchangeInit.replay`) the questions of the previous run they match. Keys are the upstream's
 * hint (`params._meta["mrtr-gateway/inputKey"]`) when it is well-formed and unused, else
 * `KIND-N`; the keys of recorded questions are never given to new ones.
 */
import { META_INPUT_KEY_HINT } from '../../protocol/wire.js';
import type { InputKind } from '../../protocol/capabilities.js';
import type { ReplayEntry } from '../../security/seal.js';

/** Accepted key hints: a letter or digit, then letters, digits, '_', '.', ':' or '-' (at most 128). */
const KEY_HINT = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;

/** Keys and replay matching for one run. */
export class Questions {
  /** Keys given out so far (a parked call holds its Exchange for minutes: the set is made on first use). */
  private usedKeys: Set<string> | undefined;
  private seq = 0;
  /** Replay mode: the index in `replay` of the recorded question the next input request is matched to (its length once the run differed). */
  private replayNext = 0;
  /** Replay mode: the questions of this run in order. */
  private readonly asked: ReplayEntry[] = [];

  /** @param replay the previous run's questions with their answers, in the order they were asked (replay mode). */
  constructor(private readonly replay: ReplayEntry[] | undefined) {
    if (replay?.length) this.usedKeys = new Set(replay.map((e) => e.k));
  }

  /**
   * Replay mode: the answer the client gave to the recorded question the next input request
   * matches (the same digest at the same place), or undefined when it is a new question. From the
   * first request whose digest differs on, nothing recorded answers.
   */
  recordedAnswer(digest: string): Record<string, unknown> | undefined {
    const replay = this.replay;
    if (replay && this.replayNext < replay.length) {
      const recorded = replay[this.replayNext]!;
      if (recorded.d !== digest) {
        // The run differs from the recorded one here: nothing recorded answers it, or what follows.
        this.replayNext = replay.length;
      } else {
        this.replayNext++;
        if (recorded.v !== undefined) {
          // Asked before at this point, in the same words: the answer the client gave then.
          this.asked.push(recorded);
          return recorded.v;
        }
      }
    }
    return undefined;
  }

  /** A fresh key for an input request of `kind`: the upstream's hint in `params._meta` when usable. */
  keyFor(kind: InputKind, params: Record<string, unknown> | undefined): string {
    const hint = (params?._meta as Record<string, unknown> | undefined)?.[META_INPUT_KEY_HINT];
    let key: string;
    if (typeof hint === 'string' && KEY_HINT.test(hint) && !this.usedKeys?.has(hint)) key = hint;
    else {
      do key = `${kind}-${++this.seq}`;
      while (this.usedKeys?.has(key));
    }
    (this.usedKeys ??= new Set()).add(key);
    return key;
  }

  /** Notes a new question of this run (its answer comes later, or never). */
  ask(entry: ReplayEntry): void {
    this.asked.push(entry);
  }

  /** The question noted last was answered at once (`prefilled`): its answer goes in the state. */
  answeredAtOnce(value: Record<string, unknown>): void {
    this.asked[this.asked.length - 1]!.v = value;
  }

  /**
   * The questions of this run in order, answered ones with their answers, then the ones still
   * outstanding (without), for the sealed state of the next run.
   */
  state(outstanding: (key: string) => boolean): ReplayEntry[] {
    return this.asked.filter((e) => e.v !== undefined || outstanding(e.k));
  }
}
