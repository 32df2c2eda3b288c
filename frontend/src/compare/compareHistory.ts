// The compare view's history, read in stages so the first frame does not wait for the
// slow read: (1) the reward of every run by stride (evenly spaced steps, index probes: the
// same cost for 1k or 1M stored points), drawn at once; (2) the other panels' keys by
// stride; (3) every key by min/max per bucket, which keeps the spikes a stride can step
// over, replacing what the strides gave. One query per stage for all the runs, each asked
// once the one before answered; the first is prefetched at boot (`prefetchCompare`).
import { queryOptions, useQueries, useQuery, type QueryClient } from "@tanstack/react-query";
import { useMemo } from "react";
import { compareMetricsQuery, fetchCompareMetrics, type CompareSource, type History, type MetricsRead } from "../api/metrics";
import { experimentQuery } from "../api/experiments";
import { answers } from "../api/queryClient";
import { experimentRunsQuery } from "../api/runs";
import { TOKENS_KEY } from "../charts/panels";
import { emptySeries, spliceWindow, valueAtStep, type Series } from "../charts/series";

export type { History } from "../api/metrics";

/** What has been drawn so far: nothing, the strides, or the spike-keeping read. */
export type HistoryStage = "loading" | "overview" | "full";

/** The key every compare view reads first (its panel and the divergence need it). */
export const FIRST_KEY = "reward/mean";

/** The compare view's panels: title, metric key. */
export const COMPARE_PANELS: [string, string][] = [
  ["Reward", FIRST_KEY], ["Accuracy", "accuracy"], ["Policy loss", "loss/policy"], ["KL", "kl"],
  ["token_mult_prob_error", "token_mult_prob_error"], ["gen_kl_error", "gen_kl_error"],
  ["Staleness", "staleness/mean"],
  ["Throughput (tokens/s)", "throughput/tokens_per_s"], ["Step time (s)", "time/step_s"],
];
/** What it reads: the reward first (its panel and the divergence are drawn from the first,
 * fastest read), the tokens for the tokens axis. */
export const COMPARE_KEYS = [FIRST_KEY, ...COMPARE_PANELS.map(([, k]) => k).filter((k) => k !== FIRST_KEY), TOKENS_KEY];

/** `next`'s series replace `prev`'s for the same run and key; the rest of `prev` stays
 * (a stage that read fewer keys keeps the others). Returns a new map; inputs are kept. */
export function mergeStage(prev: History | null, next: History): History {
  const out: History = new Map();
  prev?.forEach((byKey, run) => out.set(run, new Map(byKey)));
  next.forEach((byKey, run) => {
    const into = out.get(run) ?? new Map<string, Series>();
    byKey.forEach((series, key) => into.set(key, series));
    out.set(run, into);
  });
  return out;
}

/** Zoomed windows (read by step, without times) spliced into the history in place of its
 * coarser points; each new point's wall time is interpolated from the history's points
 * around it (a window holds no time of its own), so the time axis still places it. */
export function spliceStepWindows(prev: History | null, windows: History): History {
  const out: History = new Map();
  prev?.forEach((byKey, run) => out.set(run, new Map(byKey)));
  windows.forEach((byKey, run) => {
    const into = out.get(run) ?? new Map<string, Series>();
    byKey.forEach((fine, key) => {
      const coarse = into.get(key) ?? emptySeries();
      const clock: Series = { step: coarse.step, value: coarse.time, time: coarse.time };
      const time = fine.step.map((s, i) => (Number.isNaN(fine.time[i]) ? valueAtStep(clock, s) ?? NaN : fine.time[i]));
      into.set(key, spliceWindow(coarse, { ...fine, time }));
    });
    out.set(run, into);
  });
  return out;
}

// Points a line: a panel is ~350 px wide at 1280 px, so 500 steps are more than one a pixel
// for the first frame (each is one index probe on the server); the min/max read that
// replaces them keeps 1,000 (500 buckets).
const STRIDE_POINTS = 500;

/** The stages' reads, in order: the first key alone, then the others, then all. */
export function historyPlan(keys: readonly string[]): MetricsRead[] {
  const [first, ...rest] = keys;
  const plan: MetricsRead[] = [{ keys: [first], maxPoints: STRIDE_POINTS, sample: "stride" }];
  if (rest.length) plan.push({ keys: rest, maxPoints: STRIDE_POINTS, sample: "stride" });
  plan.push({ keys: [...keys], maxPoints: 1000, sample: "minmax" });
  return plan;
}

/** A stage's query: the shared read (same key), marked for bench/compare_view.py when parsed. */
function stageQuery(source: CompareSource, read: MetricsRead) {
  return queryOptions({
    queryKey: compareMetricsQuery(source, read).queryKey,
    queryFn: async ({ signal }) => {
      const history = await fetchCompareMetrics(source, read, signal);
      performance.mark(`paddock:history:${read.sample}:${read.keys?.length}`);
      return history;
    },
  });
}

/** Starts a compare page's reads at boot, beside the session check and the page's code
 * instead of after both: the first stage, the experiment and its runs, under the keys the
 * page's hooks read (with no session they fail, unread, and the page asks again). */
export function prefetchCompare(client: QueryClient, experimentId: number): void {
  const source: CompareSource = { experiment: experimentId };
  void client.prefetchQuery(stageQuery(source, historyPlan(COMPARE_KEYS)[0]));
  void client.prefetchQuery(experimentRunsQuery(experimentId));
  void client.prefetchQuery(experimentQuery(experimentId));
}

/** A drag-zoom on the step axis: `key` of every run between two steps. */
export interface StepWindow { key: string; from: number; to: number }

/** The history of `source` in stages, with the zoomed `windows` (read by step at full
 * resolution) spliced in. `painted` turns true once the first stage answered (or failed):
 * the moment to open the live streams, whose snapshots would otherwise queue before the
 * first read on the server. */
export function useCompareHistory(source: CompareSource | null, keys: readonly string[],
  windows: readonly StepWindow[] = []) {
  const plan = useMemo(() => historyPlan(keys), [keys]);
  const any = source ?? { runs: [] };
  const first = useQuery({ ...stageQuery(any, plan[0]), enabled: !!source });
  const others = useQuery({ ...stageQuery(any, plan[plan.length - 2]),
    enabled: !!source && plan.length === 3 && first.isSuccess });
  const all = useQuery({ ...stageQuery(any, plan[plan.length - 1]),
    enabled: !!source && (plan.length === 3 ? others.isSuccess : first.isSuccess) });
  const fine = useQueries({
    queries: windows.map((w) => ({
      ...compareMetricsQuery(any, { keys: [w.key], maxPoints: 1000, x: "step", xMin: w.from, xMax: w.to }),
      enabled: !!source, staleTime: Infinity,
    })),
    combine: answers,
  });
  const stages = plan.length === 3 ? [first.data, others.data, all.data] : [first.data, all.data];
  const error = first.error ?? others.error ?? all.error;
  const history = useMemo(() => {
    let h: History | null = null;
    for (const stage of stages) if (stage) h = mergeStage(h, stage);
    for (const window of fine) if (window) h = spliceStepWindows(h, window);
    return h ?? (error ? new Map() : null);
  // eslint-disable-next-line react-hooks/exhaustive-deps -- the stages' answers are the inputs
  }, [first.data, others.data, all.data, fine, error]);
  const stage: HistoryStage = all.data ? "full" : first.data ? "overview" : "loading";
  return { history, stage, error, painted: !first.isPending || !source };
}
