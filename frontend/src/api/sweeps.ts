// /api/v1/sweeps: a team's sweeps, one with its members, the creation (with its
// validate_only check) and the stop.
import { useQuery } from "@tanstack/react-query";
import { listOf, request, type ListBody } from "./client";
import { queryClient } from "./queryClient";
import { queryKeys } from "./queryKeys";
import type { Sweep, SweepCreateRequest, SweepDetail, SweepValidation } from "./types";

/** How often an unfinished sweep is read again: its runs' changes come over the
 * experiment's stream (the page invalidates on them), but what the sweep itself decides
 * (a member stopped, the next launched, the budget) has no stream of its own. */
const UNFINISHED_REFETCH_MS = 5_000;

export function useSweeps(teamId: number | null) {
  return useQuery({
    queryKey: queryKeys.sweeps.list(teamId ?? 0),
    queryFn: async ({ signal }) => listOf(await request<ListBody<Sweep>>("/api/v1/sweeps",
      { query: { team: teamId, limit: 200 }, signal })),
    enabled: !!teamId,
  });
}

export function useSweep(id: number | null) {
  return useQuery({
    queryKey: queryKeys.sweeps.detail(id ?? 0),
    queryFn: ({ signal }) => request<SweepDetail>(`/api/v1/sweeps/${id}`, { signal }),
    enabled: !!id,
    refetchInterval: (query) => query.state.data && query.state.data.state !== "finished"
      ? UNFINISHED_REFETCH_MS : false,
  });
}

/** POST /sweeps; with validate_only the report (200), else the new sweep (201). */
export async function createSweep(body: SweepCreateRequest, signal?: AbortSignal): Promise<SweepDetail | SweepValidation> {
  const answer = await request<SweepDetail | SweepValidation>("/api/v1/sweeps", { method: "POST", body, signal });
  if (!body.validate_only) {
    void queryClient.invalidateQueries({ queryKey: queryKeys.sweeps.all });
    void queryClient.invalidateQueries({ queryKey: queryKeys.runs.lists });
    void queryClient.invalidateQueries({ queryKey: queryKeys.experiments.all });
  }
  return answer;
}

/** The server's check of a sweep as it is edited (creates nothing); the last answer is
 * shown while the next is asked. */
export function useSweepCheck(body: SweepCreateRequest | null) {
  const check = body && { ...body, validate_only: true };
  return useQuery({
    queryKey: queryKeys.sweeps.check(check),
    queryFn: ({ signal }) => createSweep(check!, signal) as Promise<SweepValidation>,
    enabled: !!check,
    placeholderData: (previous) => previous,
    staleTime: Infinity,
  });
}

export async function stopSweep(id: number): Promise<SweepDetail> {
  const answer = await request<SweepDetail>(`/api/v1/sweeps/${id}/stop`, { method: "POST" });
  queryClient.setQueryData(queryKeys.sweeps.detail(id), answer);
  void queryClient.invalidateQueries({ queryKey: queryKeys.sweeps.all });
  return answer;
}
