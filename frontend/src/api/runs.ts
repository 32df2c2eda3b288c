// /api/v1/runs/… (the metrics endpoints: metrics.ts): a typed query per endpoint.
import { infiniteQueryOptions, queryOptions, useInfiniteQuery, useQuery, type InfiniteData } from "@tanstack/react-query";
import { request } from "./client";
import { queryClient } from "./queryClient";
import { queryKeys, type RunListQuery } from "./queryKeys";
import type {
  Checkpoint, Run, RunAction, RunDetail, RunEventPage, RunFilters, SampleSetPage,
} from "./types";

/** A page of the run list (cursor pagination): what the cache holds for every list. */
export interface RunPage { results: Run[]; next?: string | null }

function runListQuery(query: RunListQuery) {
  return queryOptions({
    queryKey: queryKeys.runs.list(query),
    queryFn: ({ signal }) => request<RunPage>("/api/v1/runs", { query: { ...query }, signal }),
  });
}

/** Every run of one experiment (at most 100), whatever team is chosen: the API keeps to
 * the caller's teams, and the key is known from the page's path alone (prefetched at boot). */
export function experimentRunsQuery(experimentId: number) {
  return runListQuery({ experiment: experimentId, limit: 100 });
}

// (module-level selects: an inline one would run, and make a new array, on every render)
const rowsOf = (page: RunPage) => page.results;
const rowsOfPages = (data: InfiniteData<RunPage>) => data.pages.flatMap((p) => p.results);

export function useExperimentRuns(experimentId: number | null) {
  return useQuery({ ...experimentRunsQuery(experimentId ?? 0), enabled: !!experimentId, select: rowsOf });
}

/** The runs table's pages: newest first, `fetchNextPage()` appends the next one. */
export function useRunPages(teamId: number | null, filters: RunFilters = {}) {
  const query: RunListQuery = { team: teamId, state: filters.state, backend: filters.backend, tag: filters.tag,
    creator: filters.creator, experiment: filters.experiment, limit: 100 };
  return useInfiniteQuery(infiniteQueryOptions({
    queryKey: queryKeys.runs.list(query),
    // the first page is the list's URL, the others its `next` links
    queryFn: ({ pageParam, signal }) => pageParam === null
      ? request<RunPage>("/api/v1/runs", { query: { ...query }, signal })
      : request<RunPage>(pageParam, { signal }),
    initialPageParam: null as string | null,
    getNextPageParam: (last) => last.next ?? undefined,
    enabled: !!teamId,
    select: rowsOfPages,
  }));
}

export function runQuery(id: number) {
  return queryOptions({
    queryKey: queryKeys.runs.detail(id),
    queryFn: ({ signal }) => request<RunDetail>(`/api/v1/runs/${id}`, { signal }),
  });
}

export function useRun(id: number | null) {
  return useQuery({ ...runQuery(id ?? 0), enabled: !!id });
}

export function useCheckpoints(id: number) {
  return useQuery({
    queryKey: queryKeys.runs.checkpoints(id),
    queryFn: ({ signal }) => request<Checkpoint[]>(`/api/v1/runs/${id}/checkpoints`, { signal }),
  });
}

export function checkpointDownloadUrl(runId: number, cp: Checkpoint): string {
  return `/api/v1/runs/${runId}/checkpoints/${cp.id}/download`;
}

/** Pause, resume or abort over REST (the run page prefers its websocket; this is the
 * fallback while the socket is down). */
export async function controlRun(id: number, action: RunAction): Promise<Run> {
  const run = await request<Run>(`/api/v1/runs/${id}/${action}`, { method: "POST" });
  void queryClient.invalidateQueries({ queryKey: queryKeys.runs.detail(id) });
  void queryClient.invalidateQueries({ queryKey: queryKeys.runs.lists });
  return run;
}

/** The log and status lines before those the stream holds, older pages on demand: nothing
 * is read until `fetchNextPage()`; the first page ends before `oldestHeld` (an event id). */
export function useRunEvents(runId: number, oldestHeld: number | null) {
  return useInfiniteQuery({
    queryKey: queryKeys.runs.events(runId),
    queryFn: ({ pageParam, signal }) => request<RunEventPage>(`/api/v1/runs/${runId}/events`,
      { query: { before: pageParam, limit: 200 }, signal }),
    initialPageParam: oldestHeld ?? 0,
    getNextPageParam: (last) => last.next_before ?? undefined,
    // asked for by a click, and older lines do not change: never read again by itself
    enabled: false,
    staleTime: Infinity,
  });
}

/** The sample sets of a run, newest step first, older pages on demand; read once
 * `enabled` (the samples tab opens). */
export function useRunSamples(runId: number, enabled: boolean) {
  return useInfiniteQuery({
    queryKey: queryKeys.runs.samples(runId),
    queryFn: ({ pageParam, signal }) => request<SampleSetPage>(`/api/v1/runs/${runId}/samples`,
      { query: { before_step: pageParam, limit: 20 }, signal }),
    initialPageParam: undefined as number | undefined,
    getNextPageParam: (last) => last.next_before_step ?? undefined,
    enabled,
    // the stream brings the new sets: the stored pages are read once
    staleTime: Infinity,
  });
}
