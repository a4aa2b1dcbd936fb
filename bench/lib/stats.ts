/** Small statistics and formatting helpers for the benchmark report. */

/** The p-th percentile (0-100) of ascending-sorted values, by nearest rank. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

/** Median of the values (mean of the two middle ones for an even count). */
export function median(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** A figure measured over several runs: the median, and the min and max beside it. */
export interface Figure {
  median: number;
  min: number;
  max: number;
  runs: number[];
}

export function figure(runs: readonly number[]): Figure {
  return { median: median(runs), min: Math.min(...runs), max: Math.max(...runs), runs: [...runs] };
}

/** Rounds to a precision that suits the magnitude (3 significant digits, at most `maxDecimals`). */
export function num(v: number, maxDecimals = 2): string {
  if (!Number.isFinite(v)) return 'n/a';
  const abs = Math.abs(v);
  const decimals = abs >= 100 ? 0 : abs >= 10 ? Math.min(1, maxDecimals) : Math.min(2, maxDecimals);
  return v.toLocaleString('en-US', { minimumFractionDigits: decimals, maximumFractionDigits: decimals });
}

/** `median (min–max)`. */
export function fmt(f: Figure, maxDecimals = 2): string {
  return `${num(f.median, maxDecimals)} (${num(f.min, maxDecimals)}–${num(f.max, maxDecimals)})`;
}

/** A ratio a/b of two medians, as `1.23×`. */
export function ratio(a: number, b: number): string {
  if (!Number.isFinite(a) || !Number.isFinite(b) || b === 0) return 'n/a';
  const r = a / b;
  return `${r >= 10 ? r.toFixed(1) : r >= 0.1 ? r.toFixed(2) : r.toPrecision(2)}×`;
}

/** Bytes as KiB or MiB with one decimal. */
export function bytes(v: number): string {
  if (!Number.isFinite(v)) return 'n/a';
  const abs = Math.abs(v);
  if (abs >= 1024 * 1024) return `${(v / 1024 / 1024).toFixed(1)} MiB`;
  if (abs >= 1024) return `${(v / 1024).toFixed(1)} KiB`;
  return `${Math.round(v)} B`;
}

/** `median (min–max)` of byte figures. */
export function fmtBytes(f: Figure): string {
  return `${bytes(f.median)} (${bytes(f.min)}–${bytes(f.max)})`;
}

/** A Markdown table. */
export function table(head: string[], rows: string[][]): string {
  const line = (cells: string[]) => `| ${cells.join(' | ')} |`;
  return [line(head), line(head.map(() => '---')), ...rows.map(line)].join('\n');
}
