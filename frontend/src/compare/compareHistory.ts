// The compare view's history, read in stages so the first frame does not wait for the
// slow read: (1) the reward of every run by stride (evenly spaced steps, index probes: the
// same cost for 1k or 1M stored points), drawn at once; (2) the other panels' keys by
// stride; (3) every key by min/max per bucket, which keeps the spikes a stride can step
// over, replacing what the strides gave. One request per stage for all the runs.
import { useCallback, useEffect, useState } from "react";
import { ApiError } from "../api/client";
import { fetchCompareMetrics, type CompareSource, type MetricsSample } from "../api/metrics";
import { experimentRunsQuery } from "../api/runs";
import { prefetchQuery } from "../api/useQuery";
import { emptySeries, spliceWindow, valueAtStep, type Series } from "../charts/series";

export type History = Map<number, Map<string, Series>>;

/** What has been drawn so far: nothing, the strides, or the spike-keeping read. */
export type HistoryStage = "loading" | "overview" | "full";

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

/** The stages' requests, in order: the first key alone, then the others, then all. */
export function historyPlan(keys: readonly string[]): { keys: string[]; sample: MetricsSample }[] {
  const [first, ...rest] = keys;
  const plan: { keys: string[]; sample: MetricsSample }[] = [{ keys: [first], sample: "stride" }];
  if (rest.length) plan.push({ keys: rest, sample: "stride" });
  plan.push({ keys: [...keys], sample: "minmax" });
  return plan;
}

/** Resolves once the browser has painted what was rendered before the call, so the next
 * request's answer (parsing, rendering) does not delay that frame. */
function afterPaint(): Promise<void> {
  return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
}

// Points a line: a panel is ~350 px wide at 1280 px, so 500 steps are more than one a pixel
// for the first frame (each is one index probe on the server); the min/max read that
// replaces them keeps 1,000 (500 buckets).
const STRIDE_POINTS = 500;

/** The key every compare view reads first (its panel and the divergence need it). */
export const FIRST_KEY = "reward/mean";

// A first read started before the page's code ran (see prefetchCompareHistory), by URL.
const prefetched = new Map<string, Promise<History>>();

function firstRead(source: CompareSource, signal: AbortSignal): Promise<History> {
  const key = JSON.stringify(source);
  const early = prefetched.get(key);
  prefetched.delete(key);
  return early ?? fetchCompareMetrics(source, [FIRST_KEY], { maxPoints: STRIDE_POINTS, sample: "stride", signal });
}

/** Called at boot with the URL the app opened on: a compare page's first read goes out
 * beside the session check and the page's code instead of after both (with no session
 * it fails, unread, and the page asks again after the login). */
export function prefetchCompareHistory(path: string): void {
  const match = /^\/experiments\/(\d+)\/compare/.exec(path);
  if (!match) return;
  const source: CompareSource = { experiment: Number(match[1]) };
  // the page's other reads, whose answers the first frame also waits for
  prefetchQuery(...experimentRunsQuery(source.experiment));
  prefetchQuery(`/api/v1/experiments/${source.experiment}`);
  const early = fetchCompareMetrics(source, [FIRST_KEY], { maxPoints: STRIDE_POINTS, sample: "stride" });
  early.catch(() => prefetched.delete(JSON.stringify(source)));
  prefetched.set(JSON.stringify(source), early);
}

/** `sourceKey` names the source (it changes when the source does). `painted` turns true
 * once the first stage is on screen (or failed): the moment to open the live streams,
 * whose snapshots would otherwise queue before the first read on the server. */
export function useCompareHistory(source: CompareSource | null, sourceKey: string, keys: readonly string[]) {
  const [history, setHistory] = useState<History | null>(null);
  const [stage, setStage] = useState<HistoryStage>("loading");
  const [error, setError] = useState<ApiError | null>(null);
  const [painted, setPainted] = useState(false);
  const keyList = keys.join(",");
  useEffect(() => {
    if (!source) return;
    const controller = new AbortController();
    setHistory(null); setStage("loading"); setError(null);
    performance.mark("paddock:history:asked");
    (async () => {
      const plan = historyPlan(keyList.split(","));
      for (const [i, step] of plan.entries()) {
        const got = i === 0 && step.keys.length === 1 && step.keys[0] === FIRST_KEY
          ? await firstRead(source, controller.signal)
          : await fetchCompareMetrics(source, step.keys,
            { maxPoints: step.sample === "stride" ? STRIDE_POINTS : 1000, sample: step.sample,
              signal: controller.signal });
        if (controller.signal.aborted) return;
        // marks for bench/compare_view.py: when each stage's answer was parsed
        performance.mark(`paddock:history:${step.sample}:${step.keys.length}`);
        setHistory((h) => mergeStage(h, got));
        setStage(step.sample === "minmax" ? "full" : "overview");
        await afterPaint();
        if (controller.signal.aborted) return;
        setPainted(true);
      }
    })().catch((err: unknown) => {
      if (controller.signal.aborted) return;
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
      setHistory((h) => h ?? new Map());
      setPainted(true);
    });
    return () => controller.abort();
  // eslint-disable-next-line react-hooks/exhaustive-deps -- sourceKey stands for source
  }, [sourceKey, keyList]);
  /** puts zoomed windows (fetchCompareStepWindow) into the history */
  const splice = useCallback((windows: History) => setHistory((h) => spliceStepWindows(h, windows)), []);
  return { history, stage, error, painted, splice };
}
