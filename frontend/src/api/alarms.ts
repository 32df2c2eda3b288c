// The runs' alarms (docs/alarms.md): GET /runs/{id}/alarms for the run page, GET /alarms
// for the compare and sweep pages, POST /runs/{id}/alarms/{name} to arm one. The stream's
// `alarms` messages write into these answers (liveCache.ts writeAlarms).
import { useQuery } from "@tanstack/react-query";
import { request } from "./client";
import { queryClient } from "./queryClient";
import { queryKeys, type CompareSource } from "./queryKeys";
import type { AlarmName, ComparedAlarms, RunAlarms } from "./types";

export function useRunAlarms(runId: number | null) {
  return useQuery({
    queryKey: queryKeys.alarms.run(runId ?? 0),
    queryFn: ({ signal }) => request<RunAlarms>(`/api/v1/runs/${runId}/alarms`, { signal }),
    enabled: !!runId,
  });
}

export function useComparedAlarms(source: CompareSource | null) {
  return useQuery({
    queryKey: queryKeys.alarms.compare(source ?? { runs: [] }),
    queryFn: ({ signal }) => request<ComparedAlarms>("/api/v1/alarms", {
      query: source && "experiment" in source ? { experiment: source.experiment } : { runs: source?.runs.join(",") },
      signal,
    }),
    enabled: !!source && ("experiment" in source || source.runs.length > 0),
  });
}

/** Arm (or disarm) an alarm to pause the run when it fires. */
export async function armAlarm(runId: number, name: AlarmName, pause: boolean): Promise<RunAlarms> {
  const answer = await request<RunAlarms>(`/api/v1/runs/${runId}/alarms/${name}`, { method: "POST", body: { pause } });
  queryClient.setQueryData(queryKeys.alarms.run(runId), answer);
  return answer;
}
