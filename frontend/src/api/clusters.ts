import { useQuery } from "./useQuery";
import type { Cluster } from "./types";

// /api/v1/clusters: where runs go, and which rollout backends each can run.

export function useClusters(teamId: number | null) {
  return useQuery<Cluster[]>(teamId ? "/api/v1/clusters" : null);
}
