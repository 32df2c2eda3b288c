// The metrics endpoints, typed by the OpenAPI schema: GET /runs/{id}/metrics (one run) and
// GET /metrics (several runs, or every run of an experiment), as queries keyed by what they
// read (queryKeys.metrics), answering series by key (by run for GET /metrics).
import { keepPreviousData, queryOptions, useQueries, useQuery } from "@tanstack/react-query";
import { useMemo } from "react";
import { request, type ApiError } from "./client";
import { answers } from "./queryClient";
import type { Series } from "../charts/series";
import { emptySeries, spliceWindow } from "../charts/series";
import { queryKeys, type CompareSource, type MetricsRead } from "./queryKeys";
import type { MetricSeriesBody, MultiMetricsBody, RunMetricsBody } from "./types";

export type { MetricsSample } from "./types";
export type { CompareSource, MetricsRead } from "./queryKeys";

/** Series by key, by run (a GET /metrics answer). */
export type History = Map<number, Map<string, Series>>;

/** The query string of a read (the API takes the keys comma-separated). */
function readQuery(read: MetricsRead) {
  return { keys: read.keys ? [...read.keys] : undefined, max_points: read.maxPoints, x: read.x ?? "time",
    sample: read.sample, x_min: read.xMin, x_max: read.xMax };
}

/** One series of an answer: null values dropped. Asked with x=time, x is the wall time
 * of every kept point (sorted by step: downsampled by time, a bucket may hold a later step
 * first); asked with x=step there is no time, NaN here (`spliceStepWindows` fills it in). */
function seriesOf(s: MetricSeriesBody, x: "time" | "step"): Series {
  const keep = s.y.map((y, i) => (y === null ? -1 : i)).filter((i) => i >= 0);
  const order = x === "time" ? keep.sort((a, b) => s.step[a] - s.step[b]) : keep;
  return { step: order.map((i) => s.step[i]), value: order.map((i) => s.y[i] as number),
    time: order.map((i) => (x === "time" ? s.x[i] : NaN)) };
}

/** Series from a metrics answer asked with x=time: x is the wall time and `step` the step of
 * every kept point, which is all the UI needs to draw any axis itself. */
export function seriesFromBody(body: { series: MetricSeriesBody[] }, x: "time" | "step" = "time"): Map<string, Series> {
  return new Map(body.series.map((s) => [s.key, seriesOf(s, x)]));
}

/** GET /runs/{id}/metrics; without `keys`, every key the run has stored. */
export function runMetricsQuery(runId: number, read: MetricsRead) {
  return queryOptions({
    queryKey: queryKeys.metrics.run(runId, read),
    queryFn: async ({ signal }) => seriesFromBody(await request<RunMetricsBody>(
      `/api/v1/runs/${runId}/metrics`, { query: readQuery(read), signal }), read.x),
  });
}

/** GET /metrics: the same keys for every run of an experiment or the runs named (at most
 * 20 a request: a longer list is split, one answer). */
export async function fetchCompareMetrics(source: CompareSource, read: MetricsRead, signal?: AbortSignal): Promise<History> {
  const sources = "experiment" in source ? [{ experiment: source.experiment }]
    : chunks(source.runs, 20).map((ids) => ({ runs: ids.join(",") }));
  const bodies = await Promise.all(sources.map((q) => request<MultiMetricsBody>("/api/v1/metrics",
    { query: { ...q, ...readQuery(read) }, signal })));
  const out: History = new Map();
  for (const body of bodies) for (const run of body.runs) out.set(run.run, seriesFromBody(run, read.x));
  return out;
}

export function compareMetricsQuery(source: CompareSource, read: MetricsRead) {
  return queryOptions({
    queryKey: queryKeys.metrics.compare(source, read),
    queryFn: ({ signal }) => fetchCompareMetrics(source, read, signal),
  });
}

function chunks<T>(list: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < list.length; i += size) out.push(list.slice(i, i + size));
  return out;
}

// the run page reads every stored key, as the compare view does: a stride read first (its
// cost does not grow with the run's length), then the min/max read that keeps every spike
const RUN_OVERVIEW: MetricsRead = { maxPoints: 1000, sample: "stride" };
const RUN_FULL: MetricsRead = { maxPoints: 2000, sample: "minmax" };

const NO_SERIES = new Map<string, Series>();

export interface RunMetrics {
  /** every stored key's series; null until the first read answers */
  history: Map<string, Series> | null;
  error: ApiError | null;
}

/** GET /runs/{id}/metrics for the run page: the overview, then the full read in its place
 * (asked once the overview answered: the server answers in order anyway). */
export function useRunMetrics(runId: number): RunMetrics {
  const overview = useQuery(runMetricsQuery(runId, RUN_OVERVIEW));
  const full = useQuery({ ...runMetricsQuery(runId, RUN_FULL), enabled: overview.isSuccess });
  const error = full.error ?? overview.error;
  return { history: full.data ?? overview.data ?? (error ? NO_SERIES : null), error };
}

/** A drag-zoom: `keys` of a run between two wall times (Unix seconds). */
export interface RunWindow { keys: readonly string[]; from: number; to: number }

/** Each zoomed window of the run at full resolution (1,000 points), spliced into
 * `history` in place of its coarser points (a window being read: the history as it is). */
export function useRunWindows(runId: number, history: Map<string, Series> | null,
  windows: readonly RunWindow[]): Map<string, Series> | null {
  const fine = useQueries({
    queries: windows.map((w) => ({
      ...runMetricsQuery(runId, { keys: w.keys, maxPoints: 1000, xMin: w.from, xMax: w.to }),
      // a zoom is an extra: a failure leaves the coarse line
      staleTime: Infinity,
    })),
    combine: answers,
  });
  return useMemo(() => {
    if (!history || !fine.some(Boolean)) return history;
    const out = new Map(history);
    for (const window of fine) {
      window?.forEach((series, key) => out.set(key, spliceWindow(out.get(key) ?? emptySeries(), series)));
    }
    return out;
  }, [history, fine]);
}

/** GET /metrics for the runs table's sparklines: the same keys for a list of runs, read
 * again when the list or the keys change; the last answer stays drawn meanwhile. */
export function useMultiMetrics(runIds: readonly number[], read: MetricsRead): History {
  const result = useQuery({ ...compareMetricsQuery({ runs: runIds }, read), enabled: runIds.length > 0,
    placeholderData: keepPreviousData });
  return result.data ?? EMPTY;
}

const EMPTY: History = new Map();
