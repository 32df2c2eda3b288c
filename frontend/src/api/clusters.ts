import { useQuery } from "@tanstack/react-query";
import { request } from "./client";
import { queryKeys } from "./queryKeys";
import type { Cluster } from "./types";

// /api/v1/clusters: where runs go, and which rollout backends each can run.

export function useClusters(teamId: number | null) {
  return useQuery({
    queryKey: queryKeys.clusters(teamId ?? 0),
    queryFn: ({ signal }) => request<Cluster[]>("/api/v1/clusters", { signal }),
    enabled: !!teamId,
  });
}
