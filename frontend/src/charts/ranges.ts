// Axis ranges where uPlot's auto range collapses: a flat series (every value equal, or equal
// but for float noise such as 1.0000001 vs 1.0000002) and a single point; and the width a
// y axis needs for its labels. Pure, so the chart component only asks these first and
// falls back to uPlot's own ranging.

/** Values that agree to this share of their magnitude are one value for a chart: the rest
 * is float rounding, and an axis spanning it has no readable ticks. */
export const FLAT_RELATIVE = 1e-6;

/** The y range of a flat series (the line in the middle, a readable axis around it); null
 * when the values really vary (uPlot's range is right then) or there are none. On a log
 * scale the range is a factor of 2 each side, linear ±5% of the value (±1 around 0). */
export function flatYRange(min: number | null | undefined, max: number | null | undefined,
  log = false): [number, number] | null {
  if (min == null || max == null || !Number.isFinite(min) || !Number.isFinite(max)) return null;
  const mid = (min + max) / 2;
  const span = Math.abs(max - min);
  if (span > Math.abs(mid) * FLAT_RELATIVE) return null;
  if (log) return mid > 0 ? [mid / 2, mid * 2] : null;
  const pad = mid === 0 ? 1 : Math.abs(mid) * 0.05;
  return [mid - pad, mid + pad];
}

/** How far each side of a lone x the axis reaches, by axis kind (seconds for time). */
const LONE_X_PAD: Record<string, number> = { step: 1, time: 60, elapsed: 60 };

/** The x range around a single x value (one point, or many at one x), so the point sits in
 * the middle instead of on a zero-width axis; null when the data spans a range. */
export function loneXRange(min: number | null | undefined, max: number | null | undefined,
  kind: string): [number, number] | null {
  if (min == null || max == null || !Number.isFinite(min) || min !== max) return null;
  const pad = LONE_X_PAD[kind] ?? Math.max(1, Math.abs(min) * 0.05);
  return [min - pad, min + pad];
}

/** The min and max of the finite values of some lines; nulls when there are none. */
export function extent(lines: readonly (readonly (number | null)[])[]): [number | null, number | null] {
  let lo = Infinity;
  let hi = -Infinity;
  for (const line of lines) {
    for (const v of line) {
      if (v === null || !Number.isFinite(v)) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  return lo <= hi ? [lo, hi] : [null, null];
}

/** Whether to draw a series' points as markers between idx0 and idx1: when its values there
 * are sparse enough for markers to be told apart (`space` CSS pixels each), and always for a
 * lone value, which has no line to draw (one point of eval/accuracy among every step). */
export function showMarkers(values: ArrayLike<number | null | undefined>, idx0: number, idx1: number,
  widthPx: number, space = 30): boolean {
  let n = 0;
  for (let i = Math.max(0, idx0); i <= Math.min(values.length - 1, idx1); i++) {
    const v = values[i];
    if (v !== null && v !== undefined && Number.isFinite(v)) n += 1;
  }
  return n <= 1 || n * space <= widthPx;
}

/** The width in CSS pixels of a y axis whose tick labels are `labels` (uPlot's 12 px font:
 * about 7 px a character, plus the ticks and a gap), never below the usual 56 px, so long
 * labels such as 1.20e-7 are not cut at the chart's left edge. */
export function yAxisWidth(labels: readonly (string | null | undefined)[] | null | undefined): number {
  const longest = Math.max(0, ...(labels ?? []).map((l) => (l ?? "").length));
  return Math.max(56, Math.ceil(longest * 7 + 18));
}
