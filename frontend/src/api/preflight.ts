// An experiment's pre-flight check (docs/preflight.md): GET /experiments/{id}/preflight, and
// POST .../preflight/override to launch the runs it holds. A run's state message reads it
// again (liveCache.ts invalidateFor): a pre-flight run that ended has its verdict in.
import { useQuery } from "@tanstack/react-query";
import { request } from "./client";
import { queryClient } from "./queryClient";
import { queryKeys } from "./queryKeys";
import type { ExperimentPreflight } from "./types";

export function useExperimentPreflight(experimentId: number | null, enabled = true) {
  return useQuery({
    queryKey: queryKeys.preflight(experimentId ?? 0),
    queryFn: ({ signal }) => request<ExperimentPreflight>(`/api/v1/experiments/${experimentId}/preflight`, { signal }),
    enabled: !!experimentId && enabled,
  });
}

export async function overridePreflight(experimentId: number): Promise<ExperimentPreflight> {
  const answer = await request<ExperimentPreflight>(`/api/v1/experiments/${experimentId}/preflight/override`,
    { method: "POST" });
  queryClient.setQueryData(queryKeys.preflight(experimentId), answer);
  void queryClient.invalidateQueries({ queryKey: queryKeys.experiments.all });
  void queryClient.invalidateQueries({ queryKey: queryKeys.runs.lists });
  return answer;
}
