// Pure transforms between stored series and what a chart draws: smoothing, the choice of
// x-axis, the alignment of several series onto one x array (uPlot's AlignedData), and
// min/max downsampling that keeps spikes.
import { valueAtStep, type Series } from "./series";
import type { XAxis } from "../api/types";

/** Exponential moving average with TensorBoard's debiasing (so the first points are not
 * pulled toward 0). weight 0 = raw, 0.99 = very smooth. Gaps (null / NaN) stay gaps and do
 * not reset the average. */
export function ema(values: readonly (number | null)[], weight: number): (number | null)[] {
  if (weight <= 0) return values.slice();
  const out: (number | null)[] = new Array(values.length);
  let last = 0;
  let n = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null || !Number.isFinite(v)) {
      out[i] = null;
      continue;
    }
    last = last * weight + (1 - weight) * v;
    n += 1;
    out[i] = last / (1 - Math.pow(weight, n));
  }
  return out;
}

/** x of every point of `series` on the chosen axis, in step order. `time` is Unix seconds
 * (uPlot's time scale unit); `tokens` reads the run's `tokens/total` series at the same
 * step (interpolated), null where it is unknown. */
export function xValues(series: Series, axis: XAxis, tokens?: Series): (number | null)[] {
  if (axis === "step") return series.step.slice();
  if (axis === "time") return series.time.slice();
  if (!tokens) return series.step.map(() => null);
  return series.step.map((s) => valueAtStep(tokens, s));
}

/** The wall-time window (Unix seconds) that covers a zoom from `lo` to `hi` on `axis`,
 * one point beyond each end included so the refetched line reaches the chart's edges; null
 * when no point falls inside. Assumes x grows with the step (true of step, time and
 * cumulative tokens). */
export function timeWindow(series: Series, axis: XAxis, lo: number, hi: number, tokens?: Series): [number, number] | null {
  const x = xValues(series, axis, tokens);
  let first = -1;
  let last = -1;
  for (let i = 0; i < x.length; i++) {
    const v = x[i];
    if (v === null || v < lo || v > hi) continue;
    if (first < 0) first = i;
    last = i;
  }
  if (first < 0) return null;
  const a = Math.max(0, first - 1);
  const b = Math.min(series.time.length - 1, last + 1);
  return [Math.min(series.time[a], series.time[b]), Math.max(series.time[a], series.time[b])];
}

export interface XY {
  x: readonly (number | null)[];
  y: readonly (number | null)[];
}

/** Several series onto one sorted x array; a series without a point at some x gets null
 * there (uPlot draws a gap or, with spanGaps, a line across). Points with a null x are
 * dropped; among equal x within one series the last wins. */
export function alignSeries(list: readonly XY[]): [number[], ...(number | null)[][]] {
  const xs = new Set<number>();
  for (const s of list) for (const x of s.x) if (x !== null && Number.isFinite(x)) xs.add(x);
  const x = [...xs].sort((a, b) => a - b);
  const index = new Map<number, number>();
  x.forEach((v, i) => index.set(v, i));
  const ys = list.map((s) => {
    const y: (number | null)[] = new Array(x.length).fill(null);
    for (let i = 0; i < s.x.length; i++) {
      const xi = s.x[i];
      if (xi === null || !Number.isFinite(xi)) continue;
      const v = s.y[i];
      y[index.get(xi)!] = v === null || !Number.isFinite(v) ? null : v;
    }
    return y;
  });
  return [x, ...ys];
}

/** At most ~`buckets`·2 points: for each bucket of consecutive points, its min and its max
 * in x order (a spike survives, unlike fixed-stride sampling). Series shorter than
 * 2·buckets come back unchanged. */
export function minMaxDownsample(
  x: readonly number[], y: readonly (number | null)[], buckets: number,
): { x: number[]; y: (number | null)[] } {
  const n = x.length;
  if (n <= buckets * 2) return { x: x.slice(), y: y.slice() };
  const outX: number[] = [];
  const outY: (number | null)[] = [];
  const size = n / buckets;
  for (let b = 0; b < buckets; b++) {
    const start = Math.floor(b * size);
    const end = Math.min(n, Math.floor((b + 1) * size));
    let iMin = -1;
    let iMax = -1;
    for (let i = start; i < end; i++) {
      const v = y[i];
      if (v === null || !Number.isFinite(v)) continue;
      if (iMin < 0 || v < (y[iMin] as number)) iMin = i;
      if (iMax < 0 || v > (y[iMax] as number)) iMax = i;
    }
    if (iMin < 0) continue;
    const [a, c] = iMin <= iMax ? [iMin, iMax] : [iMax, iMin];
    outX.push(x[a]); outY.push(y[a]);
    if (c !== a) { outX.push(x[c]); outY.push(y[c]); }
  }
  return { x: outX, y: outY };
}

/** For log scales: values ≤ 0 cannot be drawn, so they become gaps. */
export function positiveOnly(y: readonly (number | null)[]): (number | null)[] {
  return y.map((v) => (v !== null && v > 0 ? v : null));
}

/** Mean over seeds per x, with the min–max band. Inputs already aligned on one x. */
export function seedBand(ys: readonly (readonly (number | null)[])[]): {
  mean: (number | null)[]; lo: (number | null)[]; hi: (number | null)[];
} {
  const n = ys.length ? ys[0].length : 0;
  const mean: (number | null)[] = new Array(n).fill(null);
  const lo: (number | null)[] = new Array(n).fill(null);
  const hi: (number | null)[] = new Array(n).fill(null);
  for (let i = 0; i < n; i++) {
    let sum = 0;
    let count = 0;
    let min = Infinity;
    let max = -Infinity;
    for (const y of ys) {
      const v = y[i];
      if (v === null || !Number.isFinite(v)) continue;
      sum += v; count += 1;
      if (v < min) min = v;
      if (v > max) max = v;
    }
    if (count) { mean[i] = sum / count; lo[i] = min; hi[i] = max; }
  }
  return { mean, lo, hi };
}

/** Keeps what a chart draws bounded however long a run streams: past `limit` points a line
 * is thinned to min/max per bucket (after smoothing, so the smoothed shape is exact).
 * Points without an x are dropped. */
export function thin(x: readonly (number | null)[], y: readonly (number | null)[], limit = 4000): XY {
  const keep = thinIndices(x, y, limit);
  return keep ? { x: keep.map((i) => x[i]), y: keep.map((i) => y[i]) } : { x, y };
}

/** The indices `thin` keeps (null: all of them), so lines that belong together (a band's
 * edges and its mean) can be thinned alike. */
export function thinIndices(x: readonly (number | null)[], y: readonly (number | null)[], limit = 4000): number[] | null {
  const keep = x.map((v, i) => (v === null ? -1 : i)).filter((i) => i >= 0);
  if (keep.length <= limit) return null;
  const kept = minMaxDownsample(keep, keep.map((i) => y[i]), Math.floor(limit / 2));
  return kept.x;
}

/** The y range of the "ignore outliers" view: the values inside Tukey's far-out fences
 * (Q1 − 3·IQR, Q3 + 3·IQR), so a spike no longer flattens the rest of the curve while a
 * real trend keeps its whole range; padded by 5%. Null when there are no values. */
export function robustRange(lines: readonly (readonly (number | null)[])[]): [number, number] | null {
  const values: number[] = [];
  for (const line of lines) for (const v of line) if (v !== null && Number.isFinite(v)) values.push(v);
  if (!values.length) return null;
  values.sort((a, b) => a - b);
  const at = (p: number) => values[Math.round(p * (values.length - 1))];
  const q1 = at(0.25);
  const q3 = at(0.75);
  const iqr = q3 - q1;
  const inside = values.filter((v) => v >= q1 - 3 * iqr && v <= q3 + 3 * iqr);
  const lo = inside[0];
  const hi = inside[inside.length - 1];
  const pad = (hi - lo) * 0.05 || Math.abs(hi) * 0.05 || 1;
  return [lo - pad, hi + pad];
}
