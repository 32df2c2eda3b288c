// Parallel coordinates of a sweep (pure: parallel.test.ts): one axis per swept key and one
// for the chosen metric, each value placed at 0 (bottom) to 1 (top) on its axis, one line
// per member. A numeric key is a linear axis, or a log one when its values are all
// positive and span at least a decade; anything else (strings, booleans, a mix) is a
// category axis, its values evenly spaced in the order they first appear.
export type Value = number | string | boolean | null | undefined;

export interface Axis {
  key: string;
  kind: "linear" | "log" | "category";
  /** linear and log: [lowest, highest]; category: its values' labels, bottom to top */
  domain: [number, number] | string[];
  /** where each tick sits (0..1) and what it reads */
  ticks: { at: number; label: string }[];
}

export interface Row { index: number; values: Record<string, Value> }

export interface Line {
  index: number;
  /** on each axis, 0..1, or null where the member has no value (the metric not reported) */
  points: (number | null)[];
}

function label(value: Value): string {
  if (value === null || value === undefined) return "null";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toPrecision(3).replace(/\.?0+(e|$)/, "$1");
  return String(value);
}

const numeric = (values: Value[]) => values.length > 0 && values.every((v) => typeof v === "number" && Number.isFinite(v));

/** The axis of `key` over the rows' values of it (missing ones left out). */
export function axisOf(key: string, rows: Row[]): Axis {
  const values = rows.map((r) => r.values[key]).filter((v) => v !== undefined);
  if (numeric(values)) {
    const nums = values as number[];
    const lo = Math.min(...nums), hi = Math.max(...nums);
    const log = lo > 0 && hi / lo >= 10;
    const axis: Axis = { key, kind: log ? "log" : "linear", domain: [lo, hi], ticks: [] };
    const distinct = [...new Set(nums)].sort((a, b) => a - b);
    const shown = distinct.length <= 6 ? distinct : [lo, hi];
    axis.ticks = shown.map((v) => ({ at: position(axis, v) as number, label: label(v) }));
    return axis;
  }
  const labels = [...new Set(values.map(label))];
  const axis: Axis = { key, kind: "category", domain: labels, ticks: [] };
  axis.ticks = labels.map((l) => ({ at: position(axis, l) as number, label: l }));
  return axis;
}

/** Where `value` sits on `axis` (0..1); a single value, or a flat axis, sits at 0.5. */
export function position(axis: Axis, value: Value): number | null {
  if (value === undefined) return null;
  if (axis.kind === "category") {
    const labels = axis.domain as string[];
    const i = labels.indexOf(label(value));
    if (i < 0) return null;
    return labels.length === 1 ? 0.5 : i / (labels.length - 1);
  }
  if (typeof value !== "number" || !Number.isFinite(value)) return null;
  const [lo, hi] = axis.domain as [number, number];
  if (hi === lo) return 0.5;
  if (axis.kind === "log") return (Math.log(value) - Math.log(lo)) / (Math.log(hi) - Math.log(lo));
  return (value - lo) / (hi - lo);
}

/** The axes of `keys` (the swept keys, then the metric) and each row's line across them. */
export function parallelCoordinates(rows: Row[], keys: string[]): { axes: Axis[]; lines: Line[] } {
  const axes = keys.map((key) => axisOf(key, rows));
  const lines = rows.map((r) => ({ index: r.index, points: axes.map((a) => position(a, r.values[a.key])) }));
  return { axes, lines };
}

/** A line's shade from its metric's place on the metric axis: 1 the best end. */
export function goodness(point: number | null, mode: "max" | "min"): number | null {
  if (point === null) return null;
  return mode === "max" ? point : 1 - point;
}
