// From many runs to the compare view's panels: runs grouped by backend, each group drawn as
// the mean over its seeds with a min–max band and every seed's line faint behind it. Seeds
// are aligned by step (exact); on the time and tokens axes the mean sits at the seeds' mean
// x of that step, and time is counted from each run's first point so runs started at
// different moments overlay.
import type { Backend, XAxis } from "../api/types";
import type { ChartBand, ChartProps, ChartSeries } from "../charts/chartTypes";
import { BACKEND_COLOR } from "../charts/palette";
import { TOKENS_KEY } from "../charts/panels";
import type { Series } from "../charts/series";
import type { EngineColumns } from "./divergence";
import { alignSeries, ema, robustRange, seedBand, thin, thinIndices, xValues, type XY } from "../charts/transforms";

export interface RunSeries {
  runId: number;
  backend: Backend;
  seed: number;
  series: Map<string, Series>;
}

export interface CompareView {
  axis: XAxis;
  smoothing: number;
  logY: boolean;
  ignoreOutliers?: boolean;
}

/** x of a run's series on the compare axis (time is elapsed seconds since its first point). */
export function compareX(run: RunSeries, s: Series, axis: XAxis): (number | null)[] {
  if (axis === "time") {
    const t0 = firstTime(run);
    return s.time.map((t) => t - t0);
  }
  return xValues(s, axis, run.series.get(TOKENS_KEY));
}

function firstTime(run: RunSeries): number {
  let t0 = Infinity;
  run.series.forEach((s) => { if (s.time.length && s.time[0] < t0) t0 = s.time[0]; });
  return Number.isFinite(t0) ? t0 : 0;
}

export function groupByBackend(runs: readonly RunSeries[]): Map<Backend, RunSeries[]> {
  const out = new Map<Backend, RunSeries[]>();
  for (const run of runs) {
    const list = out.get(run.backend) ?? [];
    list.push(run);
    out.set(run.backend, list);
  }
  return out;
}

/** Per step: the mean over the seeds (smoothed per seed first), its band, and the mean x. */
export function backendMean(runs: readonly RunSeries[], key: string, view: CompareView): {
  steps: number[]; x: (number | null)[]; mean: (number | null)[]; lo: (number | null)[]; hi: (number | null)[];
} {
  const withKey = runs.filter((r) => r.series.get(key)?.step.length);
  const bySteps = alignSeries(withKey.map((r) => {
    const s = r.series.get(key)!;
    return { x: s.step, y: ema(s.value, view.smoothing) };
  }));
  const steps = bySteps[0];
  const { mean, lo, hi } = seedBand(bySteps.slice(1) as (number | null)[][]);
  const xs = alignSeries(withKey.map((r) => {
    const s = r.series.get(key)!;
    return { x: s.step, y: compareX(r, s, view.axis) };
  }));
  const x = steps.map((_, i) => {
    let sum = 0; let n = 0;
    for (const col of xs.slice(1) as (number | null)[][]) { const v = col[i]; if (v !== null) { sum += v; n++; } }
    return n ? sum / n : null;
  });
  return { steps, x, mean, lo, hi };
}

/** Each run's raw `key` of backends `a` and `b` on one step axis: a column per run, for the
 * divergence (which smooths each run itself and reads the spread over the seeds). */
export function seedColumns(runs: readonly RunSeries[], a: Backend, b: Backend, key: string): {
  steps: number[]; a: (number | null)[][]; b: (number | null)[][];
} {
  const pick = (backend: Backend) => runs.filter((r) => r.backend === backend && r.series.get(key)?.step.length);
  const ra = pick(a);
  const rb = pick(b);
  const [steps, ...cols] = alignSeries([...ra, ...rb].map((r) => {
    const s = r.series.get(key)!;
    return { x: s.step, y: s.value };
  }));
  return { steps, a: cols.slice(0, ra.length), b: cols.slice(ra.length) };
}

/** One backend's engine metrics (token_mult_prob_error, gen_kl_error): a column per run on
 * each metric's step axis, for the engine verdict (divergence.ts judgeEngine). */
export function engineColumns(runs: readonly RunSeries[], backend: Backend): EngineColumns {
  const mine = runs.filter((r) => r.backend === backend);
  const columns = (key: string) => {
    const withKey = mine.filter((r) => r.series.get(key)?.step.length);
    if (!withKey.length) return { steps: [], cols: [] };
    const [steps, ...cols] = alignSeries(withKey.map((r) => {
      const s = r.series.get(key)!;
      return { x: s.step, y: s.value };
    }));
    return { steps, cols };
  };
  return { backend, runs: mine.length, tmpe: columns("token_mult_prob_error"), genKl: columns("gen_kl_error") };
}

/** One metric's panel: per backend the seeds faint, the band, the mean. */
export function comparePanel(title: string, key: string, runs: readonly RunSeries[], view: CompareView,
  syncKey?: string): ChartProps {
  const lines: XY[] = [];
  const series: ChartSeries[] = [];
  const bands: ChartBand[] = [];
  groupByBackend(runs).forEach((group, backend) => {
    const color = BACKEND_COLOR[backend] ?? "#555555";
    const present = group.filter((r) => r.series.get(key)?.step.length);
    if (!present.length) return;
    if (present.length > 1) {
      for (const run of present) {
        const s = run.series.get(key)!;
        lines.push(thin(compareX(run, s, view.axis), ema(s.value, view.smoothing), 2000));
        series.push({ label: `${backend} seed ${run.seed}`, color, faint: true, hidden: true });
      }
    }
    const full = backendMean(present, key, view);
    const keep = thinIndices(full.x, full.mean, 4000);
    const pick = <T,>(a: T[]) => (keep ? keep.map((i) => a[i]) : a);
    const m = { x: pick(full.x), mean: pick(full.mean), lo: pick(full.lo), hi: pick(full.hi) };
    if (present.length > 1) {
      lines.push({ x: m.x, y: m.hi });
      series.push({ label: `${backend} max`, color, faint: true, hidden: true, width: 0 });
      lines.push({ x: m.x, y: m.lo });
      series.push({ label: `${backend} min`, color, faint: true, hidden: true, width: 0 });
      bands.push({ upper: lines.length - 1, lower: lines.length, color });
    }
    lines.push({ x: m.x, y: m.mean });
    series.push({ label: present.length > 1 ? `${backend} (mean of ${present.length})` : backend, color, width: 2 });
  });
  return {
    title, data: lines.length ? alignSeries(lines) : [[]], series, bands,
    xKind: view.axis === "time" ? "elapsed" : view.axis, logY: view.logY, syncKey,
    yRange: view.ignoreOutliers && !view.logY ? robustRange(lines.map((l) => l.y)) : null,
  };
}
