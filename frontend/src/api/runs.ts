import { useCallback, useState } from "react";
import { ApiError, listOf, request, type ListBody } from "./client";
import { invalidate, useQuery } from "./useQuery";
import type { Series } from "../charts/series";
import type {
  Checkpoint, MultiMetricsBody, Run, RunAction, RunEventPage, RunFilters, RunMetricsBody, SampleSetPage,
} from "./types";

// /api/v1/runs/… and /api/v1/metrics.

export function useRuns(teamId: number | null, filters: RunFilters = {}) {
  return useQuery<Run[], ListBody<Run>>(
    teamId ? "/api/v1/runs" : null, runQuery(teamId, filters), listOf);
}

function runQuery(teamId: number | null, filters: RunFilters) {
  return { team: teamId, state: filters.state, backend: filters.backend, tag: filters.tag,
    creator: filters.creator, experiment: filters.experiment, limit: 100 };
}

/** Every run of one experiment (at most 100), whatever team is chosen: the API keeps to
 * the caller's teams, and the URL is known from the page's path alone (so it can be
 * prefetched at boot, see `experimentRunsQuery`). */
export function useExperimentRuns(experimentId: number | null) {
  const [path, query] = experimentRunsQuery(experimentId ?? 0);
  return useQuery<Run[], ListBody<Run>>(experimentId ? path : null, query, listOf);
}

export function experimentRunsQuery(experimentId: number): [string, { experiment: number; limit: number }] {
  return ["/api/v1/runs", { experiment: experimentId, limit: 100 }];
}

/** The runs table's pages: newest first, `more()` appends the next page. */
export function useRunPages(teamId: number | null, filters: RunFilters = {}) {
  const first = useQuery<{ runs: Run[]; next: string | null }, { results: Run[]; next?: string | null }>(
    teamId ? "/api/v1/runs" : null, runQuery(teamId, filters),
    (body) => ({ runs: body.results, next: body.next ?? null }));
  const [pages, setPages] = useState<{ key: unknown; runs: Run[]; next: string | null }>({ key: null, runs: [], next: null });
  const [loadingMore, setLoadingMore] = useState(false);
  const [moreError, setMoreError] = useState<ApiError | null>(null);
  const fresh = pages.key === first.data;
  const next = fresh ? pages.next : first.data?.next ?? null;
  const more = useCallback(async () => {
    if (!next) return;
    setLoadingMore(true);
    setMoreError(null);
    try {
      const body = await request<{ results: Run[]; next?: string | null }>(next);
      setPages((p) => ({ key: first.data, runs: [...(p.key === first.data ? p.runs : []), ...body.results],
        next: body.next ?? null }));
    } catch (err) {
      setMoreError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
    } finally {
      setLoadingMore(false);
    }
  }, [next, first.data]);
  const data = first.data ? [...first.data.runs, ...(fresh ? pages.runs : [])] : undefined;
  return { ...first, data, hasMore: !!next, more, loadingMore, moreError };
}

export function useRun(id: number | null) {
  return useQuery<Run>(id ? `/api/v1/runs/${id}` : null);
}

/** Series from a metrics answer asked with x=time: x is the wall time and `step` the step of
 * every kept point, which is all the UI needs to draw any axis itself. */
export function seriesFromBody(body: RunMetricsBody): Map<string, Series> {
  const out = new Map<string, Series>();
  for (const s of body.series) {
    const value: number[] = [];
    const step: number[] = [];
    const time: number[] = [];
    s.y.forEach((y, i) => {
      if (y === null) return;
      value.push(y); step.push(s.step[i]); time.push(s.x[i]);
    });
    // downsampled by time, so sort by step (equal for a monotonic clock; safe otherwise)
    const order = step.map((_, i) => i).sort((a, b) => step[a] - step[b]);
    out.set(s.key, { step: order.map((i) => step[i]), value: order.map((i) => value[i]),
      time: order.map((i) => time[i]) });
  }
  return out;
}

/** History of some metrics, downsampled by the server to about `maxPoints` per key: min/max
 * per bucket, so spikes survive, or (`stride`) evenly spaced steps, a fast first look. */
export async function fetchRunMetrics(id: number, keys: readonly string[], maxPoints = 2000,
  signal?: AbortSignal, sample: MetricsSample = "minmax"): Promise<Map<string, Series>> {
  const body = await request<RunMetricsBody>(`/api/v1/runs/${id}/metrics`, {
    query: { keys: [...keys], max_points: maxPoints, x: "time", sample }, signal });
  return seriesFromBody(body);
}

export type MetricsSample = "minmax" | "stride";

/** What a comparison reads: every run of an experiment (one request, no need to list the
 * runs first), or runs named one by one. */
export type CompareSource = { experiment: number } | { runs: readonly number[] };

/** The same keys for the runs of a comparison, in one request. `stride` is the fast,
 * coarse read of a first frame (evenly spaced steps found by index probes); `minmax` keeps
 * every spike but reads every stored point. */
export async function fetchCompareMetrics(source: CompareSource, keys: readonly string[],
  options: { maxPoints?: number; sample?: MetricsSample; signal?: AbortSignal } = {},
): Promise<Map<number, Map<string, Series>>> {
  const which = "experiment" in source ? { experiment: source.experiment } : { runs: source.runs.map(String) };
  const body = await request<MultiMetricsBody>("/api/v1/metrics", {
    query: { ...which, keys: [...keys], max_points: options.maxPoints ?? 1000, x: "time",
      sample: options.sample ?? "minmax" }, signal: options.signal });
  const out = new Map<number, Map<string, Series>>();
  for (const run of body.runs) out.set(run.run, seriesFromBody(run));
  return out;
}

/** A window of steps [from, to] of some metrics of every run of a comparison, min/max per
 * bucket (a zoom on the step axis). Asked with x=step, so each series' `time` is NaN here:
 * `spliceStepWindows` fills it from the history it lands in. */
export async function fetchCompareStepWindow(source: CompareSource, keys: readonly string[],
  from: number, to: number, signal?: AbortSignal): Promise<Map<number, Map<string, Series>>> {
  const which = "experiment" in source ? { experiment: source.experiment } : { runs: source.runs.map(String) };
  const body = await request<MultiMetricsBody>("/api/v1/metrics", {
    query: { ...which, keys: [...keys], max_points: 1000, x: "step", x_min: from, x_max: to }, signal });
  const out = new Map<number, Map<string, Series>>();
  for (const run of body.runs) {
    const byKey = new Map<string, Series>();
    for (const s of run.series) {
      const keep = s.y.map((y, i) => (y === null ? -1 : i)).filter((i) => i >= 0);
      byKey.set(s.key, { step: keep.map((i) => s.step[i]), value: keep.map((i) => s.y[i] as number),
        time: keep.map(() => NaN) });
    }
    out.set(run.run, byKey);
  }
  return out;
}

/** A window of some metrics of one run at full resolution (a chart zoomed in): `from` and
 * `to` are Unix seconds, as `seriesFromBody` needs x=time. */
export async function fetchRunWindow(id: number, keys: readonly string[], from: number, to: number,
  maxPoints = 1000, signal?: AbortSignal): Promise<Map<string, Series>> {
  const body = await request<RunMetricsBody>(`/api/v1/runs/${id}/metrics`, {
    query: { keys: [...keys], max_points: maxPoints, x: "time", x_min: from, x_max: to }, signal });
  return seriesFromBody(body);
}

/** The same keys for several runs (at most 20 per request: larger sets are split). */
export async function fetchMultiMetrics(runIds: readonly number[], keys: readonly string[],
  maxPoints = 2000, signal?: AbortSignal, sample: MetricsSample = "minmax",
): Promise<Map<number, Map<string, Series>>> {
  const out = new Map<number, Map<string, Series>>();
  const chunks: number[][] = [];
  for (let i = 0; i < runIds.length; i += 20) chunks.push(runIds.slice(i, i + 20));
  const bodies = await Promise.all(chunks.map((ids) => request<MultiMetricsBody>("/api/v1/metrics", {
    query: { runs: ids.map(String), keys: [...keys], max_points: maxPoints, x: "time", sample }, signal })));
  for (const body of bodies) for (const run of body.runs) out.set(run.run, seriesFromBody(run));
  return out;
}

export function useCheckpoints(id: number | null) {
  return useQuery<Checkpoint[]>(id ? `/api/v1/runs/${id}/checkpoints` : null);
}

export function checkpointDownloadUrl(runId: number, cp: Checkpoint): string {
  return `/api/v1/runs/${runId}/checkpoints/${cp.id}/download`;
}

/** Pause, resume or abort over REST (the run page prefers its websocket; this is the
 * fallback while the socket is down). */
export async function controlRun(id: number, action: RunAction): Promise<Run> {
  const run = await request<Run>(`/api/v1/runs/${id}/${action}`, { method: "POST" });
  invalidate("/api/v1/runs");
  return run;
}

/** The log and status events before the event `before`, newest first (scrolling a log
 * tail back); `next_before` continues, null when there are no older ones. */
export function fetchOlderEvents(runId: number, before: number, limit = 200): Promise<RunEventPage> {
  return request<RunEventPage>(`/api/v1/runs/${runId}/events`, { query: { before, limit } });
}

/** The sample sets of a run, newest step first (`beforeStep`: those before that step). */
export function fetchSampleSets(runId: number, beforeStep?: number, limit = 20): Promise<SampleSetPage> {
  return request<SampleSetPage>(`/api/v1/runs/${runId}/samples`, { query: { before_step: beforeStep, limit } });
}
