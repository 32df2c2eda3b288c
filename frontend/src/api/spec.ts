import { useQuery } from "./useQuery";
import type { JsonSchema } from "../launcher/schema";

// The RunSpec JSON Schema (workers/spec.py), which drives the launcher form.

export function useRunSpecSchema() {
  return useQuery<JsonSchema>("/api/v1/spec/schema");
}
