import { useQuery } from "@tanstack/react-query";
import { request } from "./client";
import { queryKeys } from "./queryKeys";
import type { Pool } from "./types";

// /api/v1/pools: the pools that host the caller's teams' runs, each showing only those runs.

export function usePools() {
  return useQuery({
    queryKey: queryKeys.pools.list,
    queryFn: ({ signal }) => request<Pool[]>("/api/v1/pools", { signal }),
  });
}

export function usePool(id: number | null) {
  return useQuery({
    queryKey: queryKeys.pools.detail(id ?? 0),
    queryFn: ({ signal }) => request<Pool>(`/api/v1/pools/${id}`, { signal }),
    enabled: !!id,
  });
}
