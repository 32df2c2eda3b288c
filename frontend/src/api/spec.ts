import { useQuery } from "@tanstack/react-query";
import { request } from "./client";
import { queryKeys } from "./queryKeys";
import type { JsonSchema } from "../launcher/schema";
import type { ConfigImportRequest, SpecImport } from "./types";

// The RunSpec JSON Schema (workers/spec.py), which drives the launcher form.

export function useRunSpecSchema() {
  return useQuery({
    queryKey: queryKeys.specSchema,
    queryFn: ({ signal }) => request<JsonSchema>("/api/v1/spec/schema", { signal }),
    staleTime: Infinity,
  });
}

/** POST /spec/import: a verl or NeMo-RL config (YAML, a command line, or both) as a spec.
 * Nothing is stored: the launcher's Import tab calls it as a mutation. */
export function importSpec(body: ConfigImportRequest, signal?: AbortSignal): Promise<SpecImport> {
  return request<SpecImport>("/api/v1/spec/import", { method: "POST", body, signal });
}
