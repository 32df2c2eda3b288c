import { useCallback, useState } from "react";
import { ApiError, listOf, request, type ListBody } from "./client";
import { invalidate, useQuery } from "./useQuery";
import type { Series } from "../charts/series";
import type {
  Checkpoint, MultiMetricsBody, Run, RunAction, RunFilters, RunMetricsBody,
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

/** History of some metrics, downsampled by the server to about `maxPoints` per key
 * (min/max per bucket, so spikes survive). */
export async function fetchRunMetrics(id: number, keys: readonly string[], maxPoints = 2000,
  signal?: AbortSignal): Promise<Map<string, Series>> {
  const body = await request<RunMetricsBody>(`/api/v1/runs/${id}/metrics`, {
    query: { keys: [...keys], max_points: maxPoints, x: "time" }, signal });
  return seriesFromBody(body);
}

/** The same keys for several runs (at most 20 per request: larger sets are split). */
export async function fetchMultiMetrics(runIds: readonly number[], keys: readonly string[],
  maxPoints = 2000, signal?: AbortSignal): Promise<Map<number, Map<string, Series>>> {
  const out = new Map<number, Map<string, Series>>();
  const chunks: number[][] = [];
  for (let i = 0; i < runIds.length; i += 20) chunks.push(runIds.slice(i, i + 20));
  const bodies = await Promise.all(chunks.map((ids) => request<MultiMetricsBody>("/api/v1/metrics", {
    query: { runs: ids.map(String), keys: [...keys], max_points: maxPoints, x: "time" }, signal })));
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
