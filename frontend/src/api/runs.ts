import { useCallback, useState } from "react";
import { ApiError, listOf, request, type ListBody } from "./client";
import { invalidate, useQuery } from "./useQuery";
import type {
  Checkpoint, Run, RunAction, RunDetail, RunEventPage, RunFilters, SampleSetPage,
} from "./types";

// /api/v1/runs/… (the metrics endpoints: metrics.ts).

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
  return useQuery<RunDetail>(id ? `/api/v1/runs/${id}` : null);
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
