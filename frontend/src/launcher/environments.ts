// The launcher's environment choice (docs/environments.md): which `env.name`s the chosen
// cluster offers (the clusters API lists, per cluster, the built-ins and what it
// advertises), and the spec with an environment picked or none. Pure: tested in
// environments.test.ts.
import type { Cluster } from "../api/types";
import { defaultsOf, optionalObject, type JsonSchema } from "./schema";

type Spec = Record<string, unknown>;

/** The names a run may take: the chosen cluster's, or, with none chosen, those of any
 * healthy cluster of the team (dispatch sends a run only where its environment is), in the
 * order the clusters list them. */
export function offeredEnvironments(healthy: readonly Cluster[], chosen: Cluster | null): string[] {
  return [...new Set((chosen ? [chosen] : healthy).flatMap((c) => c.environments ?? []))];
}

/** The schema's EnvSpec, or null when the server's RunSpec has no `env` (an older one). */
export function envSchema(schema: JsonSchema): JsonSchema | null {
  const raw = schema.properties?.env;
  return raw ? optionalObject(schema, raw) : null;
}

function isObject(v: unknown): v is Spec {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** `spec` with environment `name` (its typed keys at their defaults, or as they were when
 * one was already picked), or with none (`env: null`, one turn a sample). `http` gets a
 * `server` section to fill in; any other name has none (spec.py refuses it there). */
export function withEnvironment(schema: JsonSchema, spec: Spec, name: string | null): Spec {
  const node = envSchema(schema);
  if (!node || name === null) return { ...spec, env: null };
  const current = isObject(spec.env) ? spec.env : defaultsOf(schema, node);
  const serverNode = node.properties?.server ? optionalObject(schema, node.properties.server) : null;
  const server = name !== "http" ? null
    : isObject(current.server) ? current.server : serverNode ? defaultsOf(schema, serverNode) : {};
  return { ...spec, env: { ...current, name, server } };
}
