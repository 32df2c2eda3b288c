// The metrics endpoints, typed by the OpenAPI schema: GET /runs/{id}/metrics (one run) and
// GET /metrics (several runs, or every run of an experiment). Plain typed reads, the
// shapes the pages use (series by key, by run), and one hook per endpoint.
import { useEffect, useState } from "react";
import { ApiError, request } from "./client";
import type { Series } from "../charts/series";
import type { MetricsSample, MultiMetricsBody, MultiMetricsQuery, RunMetricsBody, RunMetricsQuery } from "./types";

export type { MetricsSample } from "./types";

/** A query with its metric keys as a list (the API takes them comma-separated). */
type WithKeys<Q> = Omit<Q, "keys"> & { keys?: readonly string[] };

function withKeyList<Q extends { keys?: readonly string[] }>(query: Q) {
  return { ...query, keys: query.keys ? [...query.keys] : undefined };
}

/** GET /runs/{id}/metrics; without keys, every key the run has stored. */
export function getRunMetrics(id: number, query: WithKeys<RunMetricsQuery>, signal?: AbortSignal): Promise<RunMetricsBody> {
  return request<RunMetricsBody>(`/api/v1/runs/${id}/metrics`, { query: withKeyList(query), signal });
}

/** GET /metrics: the same keys for the runs named, or every run of an experiment. */
export function getMultiMetrics(query: WithKeys<MultiMetricsQuery>, signal?: AbortSignal): Promise<MultiMetricsBody> {
  return request<MultiMetricsBody>("/api/v1/metrics", { query: withKeyList(query), signal });
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

/** History of some metrics (all of them without `keys`), downsampled by the server to
 * about `maxPoints` per key: min/max per bucket, so spikes survive, or (`stride`) evenly
 * spaced steps, a fast first look. */
export async function fetchRunMetrics(id: number, keys: readonly string[] | undefined, maxPoints = 2000,
  signal?: AbortSignal, sample: MetricsSample = "minmax"): Promise<Map<string, Series>> {
  return seriesFromBody(await getRunMetrics(id, { keys, max_points: maxPoints, x: "time", sample }, signal));
}

/** A window of some metrics of one run at full resolution (a chart zoomed in): `from` and
 * `to` are Unix seconds, as `seriesFromBody` needs x=time. */
export async function fetchRunWindow(id: number, keys: readonly string[], from: number, to: number,
  maxPoints = 1000, signal?: AbortSignal): Promise<Map<string, Series>> {
  return seriesFromBody(await getRunMetrics(id,
    { keys, max_points: maxPoints, x: "time", x_min: from, x_max: to }, signal));
}

/** What a comparison reads: every run of an experiment (one request, no need to list the
 * runs first), or runs named one by one. */
export type CompareSource = { experiment: number } | { runs: readonly number[] };

function sourceQuery(source: CompareSource) {
  return "experiment" in source ? { experiment: source.experiment } : { runs: source.runs.join(",") };
}

/** The same keys for the runs of a comparison, in one request. `stride` is the fast,
 * coarse read of a first frame (evenly spaced steps found by index probes); `minmax` keeps
 * every spike but reads every stored point. */
export async function fetchCompareMetrics(source: CompareSource, keys: readonly string[],
  options: { maxPoints?: number; sample?: MetricsSample; signal?: AbortSignal } = {},
): Promise<Map<number, Map<string, Series>>> {
  const body = await getMultiMetrics({ ...sourceQuery(source), keys, max_points: options.maxPoints ?? 1000,
    x: "time", sample: options.sample ?? "minmax" }, options.signal);
  const out = new Map<number, Map<string, Series>>();
  for (const run of body.runs) out.set(run.run, seriesFromBody(run));
  return out;
}

/** A window of steps [from, to] of some metrics of every run of a comparison, min/max per
 * bucket (a zoom on the step axis). Asked with x=step, so each series' `time` is NaN here:
 * `spliceStepWindows` fills it from the history it lands in. */
export async function fetchCompareStepWindow(source: CompareSource, keys: readonly string[],
  from: number, to: number, signal?: AbortSignal): Promise<Map<number, Map<string, Series>>> {
  const body = await getMultiMetrics({ ...sourceQuery(source), keys, max_points: 1000, x: "step",
    x_min: from, x_max: to }, signal);
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

/** The same keys for several runs (at most 20 per request: larger sets are split). */
export async function fetchMultiMetrics(runIds: readonly number[], keys: readonly string[],
  maxPoints = 2000, signal?: AbortSignal, sample: MetricsSample = "minmax",
): Promise<Map<number, Map<string, Series>>> {
  const out = new Map<number, Map<string, Series>>();
  const chunks: number[][] = [];
  for (let i = 0; i < runIds.length; i += 20) chunks.push(runIds.slice(i, i + 20));
  const bodies = await Promise.all(chunks.map((ids) => getMultiMetrics(
    { runs: ids.join(","), keys, max_points: maxPoints, x: "time", sample }, signal)));
  for (const body of bodies) for (const run of body.runs) out.set(run.run, seriesFromBody(run));
  return out;
}

function asApiError(err: unknown): ApiError {
  return err instanceof ApiError ? err : new ApiError(0, "client", (err as Error)?.message ?? String(err));
}

export interface RunMetricsState {
  /** every stored key's series; null until the first read answers */
  history: Map<string, Series> | null;
  error: ApiError | null;
}

/** GET /runs/{id}/metrics for the run page: every stored key, read as the compare view
 * does, a stride read first (its cost does not grow with the run's length), then the
 * min/max read that keeps every spike replaces it. */
export function useRunMetrics(runId: number | null): RunMetricsState {
  const [state, setState] = useState<RunMetricsState & { runId: number | null }>(
    { runId: null, history: null, error: null });
  useEffect(() => {
    if (runId === null) return;
    const controller = new AbortController();
    setState({ runId, history: null, error: null });
    (async () => {
      const coarse = await fetchRunMetrics(runId, undefined, 1000, controller.signal, "stride");
      if (!controller.signal.aborted) setState({ runId, history: coarse, error: null });
      const full = await fetchRunMetrics(runId, undefined, 2000, controller.signal);
      if (!controller.signal.aborted) setState({ runId, history: full, error: null });
    })().catch((err: unknown) => {
      if (controller.signal.aborted) return;
      setState((s) => ({ runId, history: s.runId === runId && s.history ? s.history : new Map(), error: asApiError(err) }));
    });
    return () => controller.abort();
  }, [runId]);
  return state.runId === runId ? state : { history: null, error: null };
}

/** GET /metrics for a list of runs (the runs table's sparklines): the same keys, one
 * request per 20 runs, read again when the set of runs or keys changes. Failures leave the
 * last answer (these are decorations). */
export function useMultiMetrics(runIds: readonly number[], keys: readonly string[],
  options: { maxPoints?: number; sample?: MetricsSample } = {}): Map<number, Map<string, Series>> {
  const [data, setData] = useState(new Map<number, Map<string, Series>>());
  const ids = runIds.join(",");
  const keyList = keys.join(",");
  const { maxPoints = 2000, sample = "minmax" } = options;
  useEffect(() => {
    if (!ids || !keyList) return;
    const controller = new AbortController();
    fetchMultiMetrics(ids.split(",").map(Number), keyList.split(","), maxPoints, controller.signal, sample)
      .then((byRun) => setData(byRun), () => { /* keep what is drawn */ });
    return () => controller.abort();
  }, [ids, keyList, maxPoints, sample]);
  return data;
}
