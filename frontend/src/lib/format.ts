// Small formatters shared by the pages.

export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "—";
  if (seconds < 60) return `${Math.round(seconds)}s`;
  const m = Math.floor(seconds / 60);
  if (m < 60) return `${m}m ${Math.round(seconds % 60)}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

export function formatNumber(v: number | null | undefined, digits = 3): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return "—";
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
  return Number(v.toPrecision(digits)).toString();
}

export function formatBytes(n: number | null | undefined): string {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function timeAgo(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return "—";
  const s = (now - Date.parse(iso)) / 1000;
  if (s < 60) return "just now";
  return `${formatDuration(s)} ago`;
}

/** Remaining time from progress so far: elapsed · (total − done) / done. */
export function eta(startedAt: string | null | undefined, step: number, total: number,
  now = Date.now()): number | null {
  if (!startedAt || step <= 0 || total <= 0 || step >= total) return null;
  const elapsed = (now - Date.parse(startedAt)) / 1000;
  return (elapsed * (total - step)) / step;
}

/** Axis tick labels with just enough decimals to tell neighbouring ticks apart (1.002 and
 * 1.004, not "1" twice); large magnitudes get k/M suffixes. */
export function formatTicks(splits: readonly (number | null)[], increment: number): string[] {
  // uPlot passes null for ticks it hides (log scales) and a useless increment on log scales
  if (!(increment > 0) || !Number.isFinite(increment)) return splits.map((v) => (v === null ? "" : formatNumber(v, 3)));
  const max = Math.max(...splits.map((v) => Math.abs(v ?? 0)));
  if (max >= 1e5) {
    const [div, suffix] = max >= 1e9 ? [1e9, "G"] : max >= 1e6 ? [1e6, "M"] : [1e3, "k"];
    const decimals = Math.max(0, Math.min(6, Math.ceil(-Math.log10(increment / div) - 1e-9)));
    return splits.map((v) => (v === null ? "" : v === 0 ? "0" : `${(v / div).toFixed(decimals)}${suffix}`));
  }
  if (increment < 1e-4 && max < 1e-3) {
    // small values: exponents, with the digits that tell neighbouring ticks apart
    const digits = Math.max(2, Math.min(8, Math.ceil(Math.log10(max / increment) - 1e-9)));
    return splits.map((v) => (v === null ? "" : v === 0 ? "0" : v.toExponential(digits)));
  }
  // fine ticks around a larger value (1.00001, 1.00002) as decimals, not 1.00e+0 twice
  const decimals = Math.max(0, Math.min(12, Math.ceil(-Math.log10(increment) - 1e-9)));
  return splits.map((v) => (v === null ? "" : v.toFixed(decimals)));
}

/** A config value in a diff table: strings bare, the rest as JSON, a missing key as —. */
export function formatValue(v: unknown): string {
  if (v === undefined) return "—";
  if (typeof v === "string") return v;
  return JSON.stringify(v);
}
