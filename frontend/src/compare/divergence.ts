// The divergence statistic of the compare view: does one config train the same on two
// backends? Two runs of one config never give the same reward curve (each samples its own
// rollouts), so the question is whether the gap between the backends is larger than the
// gap the runs' own noise explains, for long enough to matter.
//
// The rule (DIVERGENCE_RULE says it in words, under the verdict):
// 1. each run's reward is smoothed by a trailing mean over its last `window` steps;
// 2. per step, the smoothed difference D = mean over A's seeds − mean over B's seeds, with a
//    95 % interval D ± t·se:
//    - with three runs or more (two seeds on a side), se from the spread of the smoothed
//      seeds, pooled over both backends (the two-sample t-test: under "same behaviour" both
//      sides share one spread), df = nA + nB − 2. A seed's smoothed curve carries its own
//      slow wander, so this is the spread that separates a backend from a seed;
//    - with one run per backend, se from the window's per-step differences, sd/√n_eff,
//      where n_eff = n(1 − ρ)/(1 + ρ) counts the window's independent points (ρ the lag-1
//      autocorrelation: reward curves wander, and neighbouring steps are not n fresh
//      samples; a plain sd/√n calls any slow wander a divergence);
// 3. a step diverges when the interval excludes 0 and |D| > `tolerance`; the backends are
//    called divergent once `persist` steps in a row diverge, from the first of them, and the
//    call clears at the first step whose interval takes 0 in again (kept as an episode).

export interface DivergenceOptions {
  /** trailing steps each run's reward is averaged over */
  window: number;
  /** the smallest difference of reward worth calling */
  tolerance: number;
  /** consecutive diverging steps before a divergence is called */
  persist: number;
}

export const DEFAULT_DIVERGENCE: DivergenceOptions = { window: 20, tolerance: 0.02, persist: 40 };

/** One run's values on the common step axis (null where it has no point). */
export type Column = readonly (number | null)[];

/** Where the interval's spread comes from: the seeds, or one run's noise per backend. */
export type DivergenceMethod = "seeds" | "autocorrelation";

export interface Divergence {
  steps: number[];
  /** per step: mean of A's runs − mean of B's runs, unsmoothed */
  diff: (number | null)[];
  /** per step: the smoothed difference D, and its 95 % interval */
  mean: (number | null)[];
  lo: (number | null)[];
  hi: (number | null)[];
  /** first step of the divergence still going on at the latest step, or null */
  divergesFrom: number | null;
  /** earlier divergences that cleared, [first step, last step] */
  episodes: [number, number][];
  /** the latest interval's largest |bound|: they agree within ± this */
  agreeWithin: number | null;
  /** the interval at the latest step came from this (null: no interval yet) */
  method: DivergenceMethod | null;
}

// two-sided 95 % quantiles of Student's t by degrees of freedom (1.96 beyond the table)
const T975: [number, number][] = [
  [1, 12.706], [2, 4.303], [3, 3.182], [4, 2.776], [5, 2.571], [6, 2.447], [7, 2.365],
  [8, 2.306], [9, 2.262], [10, 2.228], [12, 2.179], [15, 2.131], [20, 2.086], [30, 2.042],
  [60, 2.0], [120, 1.98],
];

/** The 97.5 % quantile of Student's t with `df` degrees of freedom (the entry at or below
 * df in the table: a little wide between entries, never narrow). */
export function tQuantile975(df: number): number {
  if (df >= 1e6) return 1.96;
  let q = T975[0][1];
  for (const [d, v] of T975) if (d <= df) q = v;
  return df > 120 ? 1.96 + (1.98 - 1.96) * (120 / df) : q;
}

function meanOf(xs: readonly number[]): number {
  return xs.reduce((s, v) => s + v, 0) / xs.length;
}

function squares(xs: readonly number[], m: number): number {
  return xs.reduce((s, v) => s + (v - m) ** 2, 0);
}

/** Trailing mean over each column's last `window` values (its own points: gaps skipped);
 * null where the column has no point, or fewer than 3 so far. */
function trailingMeans(col: Column, window: number): (number | null)[] {
  const out: (number | null)[] = new Array(col.length).fill(null);
  const recent: number[] = [];
  for (let i = 0; i < col.length; i++) {
    const v = col[i];
    if (v === null || !Number.isFinite(v)) continue;
    recent.push(v);
    if (recent.length > window) recent.shift();
    if (recent.length >= Math.min(window, 3)) out[i] = meanOf(recent);
  }
  return out;
}

/** Lag-1 autocorrelation of `d` around its mean, in [0, 0.99] (negative counts as none). */
function lag1(d: readonly number[]): number {
  const m = meanOf(d);
  const ss = squares(d, m);
  if (ss === 0) return 0;
  let lag = 0;
  for (let k = 0; k + 1 < d.length; k++) lag += (d[k] - m) * (d[k + 1] - m);
  return Math.min(Math.max(lag / ss, 0), 0.99);
}

/** Half-width of the 95 % interval of a window's mean difference `m` with one run a side. */
function autocorrelatedHalfWidth(d: readonly number[], m: number): number {
  const rho = lag1(d);
  const n = d.length;
  const ss = squares(d, m);
  if (ss === 0) return 0;
  const nEff = Math.max(2, (n * (1 - rho)) / (1 + rho));
  const sd = Math.sqrt(ss / (n - 1));
  return (tQuantile975(nEff - 1) * sd) / Math.sqrt(nEff);
}

/** Half-width of the 95 % interval of mean(a) − mean(b) from the pooled spread of the runs. */
function pooledHalfWidth(a: readonly number[], b: readonly number[]): number {
  const df = a.length + b.length - 2;
  const pooled = (squares(a, meanOf(a)) + squares(b, meanOf(b))) / df;
  return tQuantile975(df) * Math.sqrt(pooled * (1 / a.length + 1 / b.length));
}

function present(cols: readonly (readonly (number | null)[])[], i: number): number[] {
  const out: number[] = [];
  for (const c of cols) {
    const v = c[i];
    if (v !== null && v !== undefined && Number.isFinite(v)) out.push(v);
  }
  return out;
}

/** The divergence of backend A's runs (`a`, one column per seed) from backend B's. */
export function divergence(
  steps: readonly number[],
  a: readonly Column[],
  b: readonly Column[],
  options: Partial<DivergenceOptions> = {},
): Divergence {
  const { window, tolerance, persist } = { ...DEFAULT_DIVERGENCE, ...options };
  const n = steps.length;
  const diff: (number | null)[] = new Array(n).fill(null);
  const mean: (number | null)[] = new Array(n).fill(null);
  const lo: (number | null)[] = new Array(n).fill(null);
  const hi: (number | null)[] = new Array(n).fill(null);
  const smoothA = a.map((c) => trailingMeans(c, window));
  const smoothB = b.map((c) => trailingMeans(c, window));
  const recent: number[] = []; // the last `window` per-step differences (one run a side)
  const episodes: [number, number][] = [];
  let start: number | null = null; // first step of the current diverging stretch
  let last: number | null = null; // its latest step
  let length = 0;
  let method: DivergenceMethod | null = null;
  let agreeWithin: number | null = null;
  const close = () => {
    if (start !== null && last !== null && length >= persist) episodes.push([start, last]);
    start = null;
    length = 0;
  };
  for (let i = 0; i < n; i++) {
    const rawA = present(a, i);
    const rawB = present(b, i);
    if (!rawA.length || !rawB.length) continue;
    diff[i] = meanOf(rawA) - meanOf(rawB);
    const sa = present(smoothA, i);
    const sb = present(smoothB, i);
    let m: number;
    let half: number;
    if (sa.length + sb.length >= 3 && sa.length && sb.length) {
      m = meanOf(sa) - meanOf(sb);
      half = pooledHalfWidth(sa, sb);
      method = "seeds";
    } else {
      recent.push(diff[i]!);
      if (recent.length > window) recent.shift();
      if (recent.length < Math.min(window, 3)) continue;
      m = meanOf(recent);
      half = autocorrelatedHalfWidth(recent, m);
      method = "autocorrelation";
    }
    mean[i] = m;
    lo[i] = m - half;
    hi[i] = m + half;
    agreeWithin = Math.max(Math.abs(m - half), Math.abs(m + half));
    const diverging = (m - half > 0 || m + half < 0) && Math.abs(m) > tolerance;
    if (!diverging) {
      close();
      continue;
    }
    if (start === null) start = steps[i];
    last = steps[i];
    length += 1;
  }
  const ongoing = start !== null && length >= persist ? start : null;
  if (ongoing === null) close();
  return {
    steps: steps.slice(), diff, mean, lo, hi, divergesFrom: ongoing, episodes,
    agreeWithin: ongoing === null ? agreeWithin : null, method,
  };
}

const fmt = (x: number) => x.toPrecision(2);

/** One line for people: "torch and vllm agree within ±0.012 reward", "torch and vllm
 * diverge from step 140 (difference +0.21 ± 0.04)". */
export function verdict(nameA: string, nameB: string, d: Divergence): string {
  let at = d.mean.length - 1;
  while (at >= 0 && d.mean[at] === null) at--;
  if (at < 0) return `${nameA} and ${nameB}: not enough common steps yet`;
  const m = d.mean[at]!;
  const half = (d.hi[at]! - d.lo[at]!) / 2;
  if (d.divergesFrom !== null) {
    return `${nameA} and ${nameB} diverge from step ${d.divergesFrom} `
      + `(reward difference ${m >= 0 ? "+" : "−"}${fmt(Math.abs(m))} ± ${fmt(half)})`;
  }
  const past = d.episodes.map(([s, e]) => `${s}–${e}`).join(", ");
  return `${nameA} and ${nameB} agree within ±${fmt(d.agreeWithin!)} reward`
    + (past ? ` (they differed at steps ${past})` : "");
}

/** The rule in words, for the page (what `divergence` computes with these options). */
export function divergenceRule(method: DivergenceMethod | null,
  options: DivergenceOptions = DEFAULT_DIVERGENCE): string {
  const { window, tolerance, persist } = options;
  const spread = method === "autocorrelation"
    ? "from the noise of the per-step difference in the window, counting only its independent "
      + "points (lag-1 autocorrelation). With one run per backend a backend cannot be told from "
      + "a seed: launch more seeds for a firmer answer"
    : "from the spread of the smoothed runs over the seeds (pooled two-sample t)";
  return `Each run's reward is averaged over its last ${window} steps; the backends diverge `
    + `when the 95 % interval of the difference of their means excludes 0 and the difference `
    + `exceeds ${tolerance}, for ${persist} steps in a row, and agree again as soon as the `
    + `interval takes in 0. The interval comes ${spread}.`;
}

// ---- the engines ------------------------------------------------------------------------
// Beside the reward, each engine is judged on its own: how far its logprobs are from its
// trainer's for the same adapter version, per token (token_mult_prob_error, ≈ 1 when they
// agree) and as a KL (gen_kl_error, ≈ 0). Each backend's runs give a distribution of both
// over every step and seed; the engine drifts when the median over its runs, smoothed over
// the alarms' window, stays above the alarms' limit to the latest step (the rule of the
// alarm prob_error_drift, workers/alarms.py, by the same thresholds: ALARM_LIMITS), and
// strays when only some steps (more than a tenth) are above it.

/** One metric's spread over an engine's steps and seeds. */
export interface Spread { n: number; median: number; p90: number; max: number }

export interface EngineJudgement {
  backend: string;
  runs: number;
  tmpe: Spread | null;
  genKl: Spread | null;
  /** null: no step reported either metric yet */
  verdict: "matches" | "strays" | "drifts" | null;
  /** the metric that decided (the worse of the two) and since which step it drifts */
  worst: "token_mult_prob_error" | "gen_kl_error" | null;
  driftsFrom: number | null;
}

/** The engine metrics of one backend's runs: a column per run on one step axis. */
export interface EngineColumns {
  backend: string;
  runs: number;
  tmpe: { steps: readonly number[]; cols: readonly Column[] };
  genKl: { steps: readonly number[]; cols: readonly Column[] };
}

function quantile(sorted: readonly number[], q: number): number {
  const i = (sorted.length - 1) * q;
  const lo = Math.floor(i);
  const hi = Math.ceil(i);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (i - lo);
}

export function spread(cols: readonly Column[]): Spread | null {
  const all = cols.flatMap((c) => c.filter((v): v is number => v !== null && Number.isFinite(v)));
  if (!all.length) return null;
  all.sort((x, y) => x - y);
  return { n: all.length, median: quantile(all, 0.5), p90: quantile(all, 0.9), max: all[all.length - 1] };
}

function medianOf(xs: number[]): number {
  const s = [...xs].sort((x, y) => x - y);
  return quantile(s, 0.5);
}

/** First step of the stretch, reaching the latest step, in which the trailing median (over
 * `window` steps) of the per-step median across runs is above `limit`, when at least
 * `persist` smoothed points long; null otherwise. */
function driftStart(steps: readonly number[], cols: readonly Column[], limit: number,
  window: number, persist: number): number | null {
  const perStep: [number, number][] = [];
  for (let i = 0; i < steps.length; i++) {
    const vals = present(cols, i);
    if (vals.length) perStep.push([steps[i], medianOf(vals)]);
  }
  let start: number | null = null;
  let length = 0;
  for (let i = window - 1; i < perStep.length; i++) {
    const m = medianOf(perStep.slice(i - window + 1, i + 1).map(([, v]) => v));
    if (m > limit) { if (start === null) start = perStep[i][0]; length++; }
    else { start = null; length = 0; }
  }
  return start !== null && length >= persist ? start : null;
}

export interface EngineLimits { window: number; persist: number; prob_error_limit: number; gen_kl_limit: number }

/** Each engine's judgement from its runs' token_mult_prob_error and gen_kl_error. */
export function judgeEngine(e: EngineColumns, limits: EngineLimits): EngineJudgement {
  const tmpe = spread(e.tmpe.cols);
  const genKl = spread(e.genKl.cols);
  const out: EngineJudgement = { backend: e.backend, runs: e.runs, tmpe, genKl, verdict: null, worst: null, driftsFrom: null };
  if (!tmpe && !genKl) return out;
  const checks = [
    { key: "token_mult_prob_error" as const, s: tmpe, on: e.tmpe, limit: limits.prob_error_limit },
    { key: "gen_kl_error" as const, s: genKl, on: e.genKl, limit: limits.gen_kl_limit },
  ];
  for (const c of checks) {
    if (!c.s) continue;
    const from = driftStart(c.on.steps, c.on.cols, c.limit, limits.window, limits.persist);
    if (from !== null && (out.driftsFrom === null || from < out.driftsFrom)) {
      Object.assign(out, { verdict: "drifts", worst: c.key, driftsFrom: from });
    }
  }
  if (out.verdict) return out;
  const over = checks.find((c) => c.s && overShare(c.on.cols, c.limit) > 0.1);
  return over ? { ...out, verdict: "strays", worst: over.key } : { ...out, verdict: "matches" };
}

function overShare(cols: readonly Column[], limit: number): number {
  const all = cols.flatMap((c) => c.filter((v): v is number => v !== null && Number.isFinite(v)));
  return all.length ? all.filter((v) => v > limit).length / all.length : 0;
}

const f4 = (x: number) => x.toPrecision(4);

/** One line per engine: "vllm drifts from its trainer from step 40 (token_mult_prob_error
 * median 1.08 over 3 runs, above 1.05)", "torch matches its trainer (…)". */
export function engineVerdict(j: EngineJudgement, limits: EngineLimits): string {
  if (!j.verdict) return `${j.backend}: no engine-vs-trainer figures yet`;
  const figures = [
    j.tmpe && `token_mult_prob_error median ${f4(j.tmpe.median)}, p90 ${f4(j.tmpe.p90)}`,
    j.genKl && `gen_kl_error median ${j.genKl.median.toPrecision(2)}, p90 ${j.genKl.p90.toPrecision(2)}`,
  ].filter(Boolean).join("; ");
  const over = j.runs === 1 ? "one run" : `${j.runs} runs`;
  const limit = j.worst === "gen_kl_error" ? limits.gen_kl_limit : limits.prob_error_limit;
  switch (j.verdict) {
    case "drifts":
      return `${j.backend} drifts from its trainer from step ${j.driftsFrom} (${j.worst} above ${limit}; ${figures}, ${over})`;
    case "strays":
      return `${j.backend} strays from its trainer on more than a tenth of steps (${j.worst} above ${limit}; ${figures}, ${over})`;
    default:
      return `${j.backend} matches its trainer (${figures}, ${over})`;
  }
}
