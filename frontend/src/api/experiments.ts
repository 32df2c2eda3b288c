import { useEffect, useState } from "react";
import { ApiError, listOf, request, type ListBody } from "./client";
import { invalidate, useQuery } from "./useQuery";
import type { CloneRequest, ConfigVersion, Experiment, LaunchRequest, LaunchResponse } from "./types";

// /api/v1/experiments, the launch (POST /experiments), clone, and config versions.

export function useExperiments(teamId: number | null) {
  return useQuery<Experiment[], ListBody<Experiment>>(
    teamId ? "/api/v1/experiments" : null, { team: teamId, limit: 200 }, listOf);
}

export function useExperiment(id: number | null) {
  return useQuery<Experiment>(id ? `/api/v1/experiments/${id}` : null);
}

function launched(body: { validate_only?: boolean }) {
  if (!body.validate_only) {
    invalidate("/api/v1/runs");
    invalidate("/api/v1/experiments");
  }
}

export async function launchExperiment(body: LaunchRequest): Promise<LaunchResponse> {
  const response = await request<LaunchResponse>("/api/v1/experiments", { method: "POST", body });
  launched(body);
  return response;
}

export async function cloneExperiment(experimentId: number, body: CloneRequest): Promise<LaunchResponse> {
  const response = await request<LaunchResponse>(`/api/v1/experiments/${experimentId}/clone`, {
    method: "POST", body });
  launched(body);
  return response;
}

export function useConfig(id: number | null | undefined) {
  return useQuery<ConfigVersion>(id ? `/api/v1/configs/${id}` : null);
}

/** Several config versions at once (the compare view's diff). */
export function useConfigs(ids: readonly number[]) {
  return useMany<ConfigVersion>(ids.map((id) => `/api/v1/configs/${id}`));
}

/** Several GETs at once, one answer (all or the first error). */
export function useMany<T>(paths: readonly string[]) {
  const key = paths.join("|");
  const [state, setState] = useState<{ key: string; data?: T[]; error: ApiError | null }>(
    { key: "", error: null });
  useEffect(() => {
    if (!key) return;
    const controller = new AbortController();
    Promise.all(key.split("|").map((path) => request<T>(path, { signal: controller.signal })))
      .then((data) => setState({ key, data, error: null }),
        (err) => { if (!controller.signal.aborted) setState({ key, error: err instanceof ApiError ? err : new ApiError(0, "client", String(err)) }); });
    return () => controller.abort();
  }, [key]);
  if (!key) return { key, data: [] as T[], error: null };
  return state.key === key ? state : { key, data: undefined, error: null };
}
