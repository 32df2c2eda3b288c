import { useQuery } from "@tanstack/react-query";
import { request } from "./client";
import { queryKeys } from "./queryKeys";
import type { JsonSchema } from "../launcher/schema";

// The RunSpec JSON Schema (workers/spec.py), which drives the launcher form.

export function useRunSpecSchema() {
  return useQuery({
    queryKey: queryKeys.specSchema,
    queryFn: ({ signal }) => request<JsonSchema>("/api/v1/spec/schema", { signal }),
    staleTime: Infinity,
  });
}
