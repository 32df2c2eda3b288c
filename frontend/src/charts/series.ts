// A metric's points kept sorted by step in parallel arrays (what uPlot wants), and the one
// way to add to it: history from the REST API (downsampled) and live points from the
// websocket land in the same place, in any order, and a step seen twice keeps the newer
// value (a resumed run re-emits steps; DESIGN: unique per (run, key, step)).

export interface Series {
  step: number[];
  value: number[];
  time: number[];
}

export type Point = readonly [step: number, value: number, time: number];

export function emptySeries(): Series {
  return { step: [], value: [], time: [] };
}

function lowerBound(sorted: number[], target: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (sorted[mid] < target) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Adds points in place (appending is O(1) per point, the live case) and returns the same
 * series. Later points win over earlier ones at the same step. */
export function mergePoints(series: Series, points: readonly Point[]): Series {
  for (const [step, value, time] of points) {
    const n = series.step.length;
    if (n === 0 || step > series.step[n - 1]) {
      series.step.push(step);
      series.value.push(value);
      series.time.push(time);
      continue;
    }
    const i = lowerBound(series.step, step);
    if (series.step[i] === step) {
      series.value[i] = value;
      series.time[i] = time;
    } else {
      series.step.splice(i, 0, step);
      series.value.splice(i, 0, value);
      series.time.splice(i, 0, time);
    }
  }
  return series;
}

/** History (e.g. downsampled to ~2k points) under live points: the live points stay exact
 * where both exist, since they are the newest values. Returns a new series. */
export function mergeHistory(history: Series, live: Series): Series {
  const merged: Series = {
    step: history.step.slice(), value: history.value.slice(), time: history.time.slice(),
  };
  const points: Point[] = live.step.map((s, i) => [s, live.value[i], live.time[i]]);
  return mergePoints(merged, points);
}

/** A window read at full resolution (a zoom) put in place of the coarser points of
 * `history` between its first and last step; the rest stays. Returns a new series. */
export function spliceWindow(history: Series, window: Series): Series {
  const n = window.step.length;
  if (n === 0) return history;
  const from = lowerBound(history.step, window.step[0]);
  let to = lowerBound(history.step, window.step[n - 1]);
  if (to < history.step.length && history.step[to] === window.step[n - 1]) to += 1;
  const cut = <T,>(a: T[], b: T[]) => [...a.slice(0, from), ...b, ...a.slice(to)];
  return { step: cut(history.step, window.step), value: cut(history.value, window.value), time: cut(history.time, window.time) };
}

/** The value of `series` at `step`: linear between the neighbouring steps, null outside. */
export function valueAtStep(series: Series, step: number): number | null {
  const n = series.step.length;
  if (n === 0 || step < series.step[0] || step > series.step[n - 1]) return null;
  const i = lowerBound(series.step, step);
  if (series.step[i] === step) return series.value[i];
  const s0 = series.step[i - 1];
  const s1 = series.step[i];
  const t = (step - s0) / (s1 - s0);
  return series.value[i - 1] + t * (series.value[i] - series.value[i - 1]);
}

/** Seconds left to `total` steps at the pace of the last `window` points (a pause or a
 * slow start long ago does not skew it, unlike elapsed/step). Null without two points. */
export function etaFromSeries(series: Series | undefined, total: number, window = 20): number | null {
  if (!series || series.step.length < 2 || total <= 0) return null;
  const last = series.step.length - 1;
  const first = Math.max(0, last - window);
  const steps = series.step[last] - series.step[first];
  const seconds = series.time[last] - series.time[first];
  if (steps <= 0 || seconds < 0) return null;
  return Math.max(0, total - series.step[last]) * (seconds / steps);
}
