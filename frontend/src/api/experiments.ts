// /api/v1/experiments, the launch (POST /experiments), clone, config versions and their diff.
import { queryOptions, useQueries, useQuery } from "@tanstack/react-query";
import { listOf, request, type ListBody } from "./client";
import { allAnswers, queryClient } from "./queryClient";
import { queryKeys } from "./queryKeys";
import type { CloneRequest, ConfigDiff, ConfigVersion, Experiment, LaunchRequest, LaunchResponse, SpecDiff,
  SpecDiffRequest } from "./types";

export function useExperiments(teamId: number | null) {
  return useQuery({
    queryKey: queryKeys.experiments.list(teamId ?? 0),
    queryFn: async ({ signal }) => listOf(await request<ListBody<Experiment>>("/api/v1/experiments",
      { query: { team: teamId, limit: 200 }, signal })),
    enabled: !!teamId,
  });
}

export function experimentQuery(id: number) {
  return queryOptions({
    queryKey: queryKeys.experiments.detail(id),
    queryFn: ({ signal }) => request<Experiment>(`/api/v1/experiments/${id}`, { signal }),
  });
}

export function useExperiment(id: number | null) {
  return useQuery({ ...experimentQuery(id ?? 0), enabled: !!id });
}

/** POST /experiments or /experiments/{id}/clone; with validate_only nothing is created. */
export type LaunchBody = { kind: "launch"; body: LaunchRequest }
  | { kind: "clone"; experiment: number; body: CloneRequest };

export async function launch(what: LaunchBody, signal?: AbortSignal): Promise<LaunchResponse> {
  const response = what.kind === "launch"
    ? await request<LaunchResponse>("/api/v1/experiments", { method: "POST", body: what.body, signal })
    : await request<LaunchResponse>(`/api/v1/experiments/${what.experiment}/clone`,
      { method: "POST", body: what.body, signal });
  if (!what.body.validate_only) {
    void queryClient.invalidateQueries({ queryKey: queryKeys.runs.lists });
    void queryClient.invalidateQueries({ queryKey: queryKeys.experiments.all });
  }
  return response;
}

/** The server's check of a launch as you edit (validate_only: creates nothing); a new
 * body is a new query, so only the newest answer is shown, the last one meanwhile. */
export function useLaunchCheck(what: LaunchBody | null) {
  const check = what && { ...what, body: { ...what.body, validate_only: true } } as LaunchBody;
  return useQuery({
    queryKey: queryKeys.launchCheck(check),
    queryFn: ({ signal }) => launch(check!, signal),
    enabled: !!check,
    placeholderData: (previous) => previous,
    staleTime: Infinity,
  });
}

export function useConfig(id: number | null | undefined) {
  return useQuery({
    queryKey: queryKeys.configs.detail(id ?? 0),
    queryFn: ({ signal }) => request<ConfigVersion>(`/api/v1/configs/${id}`, { signal }),
    enabled: !!id,
  });
}

/** GET /configs/diff of `base` against each of `others` (the keys that differ, by the
 * server's rule); `data` once every one answered. */
export function useConfigDiffs(base: number | null, others: readonly number[]) {
  return useQueries({
    queries: others.map((other) => ({
      queryKey: queryKeys.configs.diff(base ?? 0, other),
      queryFn: ({ signal }: { signal: AbortSignal }) => request<ConfigDiff>("/api/v1/configs/diff",
        { query: { a: base, b: other }, signal }),
      enabled: base !== null,
      // two config versions never change
      staleTime: Infinity,
    })),
    combine: allAnswers,
  });
}

/** POST /configs/diff of a spec not stored yet (the launcher's edit of a clone) against a
 * stored version or another spec, by the server's one rule. A body's answer never changes;
 * while a new body is asked, the last answer stays (placeholder). null: nothing asked. */
export function useSpecDiff(body: SpecDiffRequest | null) {
  return useQuery({
    queryKey: queryKeys.configs.specDiff(body),
    queryFn: ({ signal }) => request<SpecDiff>("/api/v1/configs/diff", { method: "POST", body, signal }),
    enabled: !!body,
    placeholderData: (previous) => previous,
    staleTime: Infinity,
  });
}
