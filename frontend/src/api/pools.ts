import { useQuery } from "./useQuery";
import type { Pool } from "./types";

// /api/v1/pools: the pools that host the caller's teams' runs, each showing only those runs.

export function usePools() {
  return useQuery<Pool[]>("/api/v1/pools");
}

export function usePool(id: number | null) {
  return useQuery<Pool>(id ? `/api/v1/pools/${id}` : null);
}
