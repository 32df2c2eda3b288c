import { useQuery } from "@tanstack/react-query";
import { listOf, request, type ListBody } from "./client";
import { queryKeys } from "./queryKeys";
import type { Dataset } from "./types";

// /api/v1/datasets: the team's uploaded JSONL and Parquet files (`dataset://<id>` in a spec).

export function useDatasets(teamId: number | null) {
  return useQuery({
    queryKey: queryKeys.datasets(teamId ?? 0),
    queryFn: async ({ signal }) => listOf(await request<ListBody<Dataset>>("/api/v1/datasets",
      { query: { limit: 200 }, signal })).filter((d) => d.team === teamId),
    enabled: !!teamId,
  });
}
