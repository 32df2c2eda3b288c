// The launcher's form state and every way it changes, as one reducer (pure: tested in
// launcherState.test.ts). What the server says about it (the validate_only report, the
// launch) are queries and mutations of the page, not state here.
import { parse, stringify } from "yaml";
import type { Backend, ConfigChange, SpecImport } from "../api/types";
import type { LaunchBody } from "../api/experiments";
import { defaultsOf, getPath, type JsonSchema } from "./schema";

export type Spec = Record<string, unknown>;

export interface LauncherState {
  spec: Spec;
  name: string;
  description: string;
  /** comma separated, as typed */
  tags: string;
  /** the first is the spec's own rollout.backend (its options show in the form) */
  backends: Backend[];
  seeds: number;
  /** undefined: not chosen yet (the only healthy cluster, or any); null: any of the team */
  cluster: number | null | undefined;
  mode: "form" | "yaml" | "import";
  yamlText: string;
  /** the YAML as typed does not parse into a spec: the spec is the last one that did */
  yamlError: string | null;
  /** the last verl / NeMo-RL import: what it read and the keys it left out */
  imported: Omit<SpecImport, "spec"> | null;
  /** a pre-flight check of the spec on each backend first, which the runs wait for
   * (docs/preflight.md) */
  preflight: boolean;
}

export type LauncherAction =
  | { type: "field"; field: "name" | "description" | "tags"; value: string }
  | { type: "preflight"; value: boolean }
  | { type: "seeds"; value: number }
  | { type: "cluster"; value: number | null }
  /** `schema` null when cloning: a clone keeps its source's rollout section (the server
   * gives every run its own backend and drops the options of the others) */
  | { type: "toggleBackend"; backend: Backend; schema: JsonSchema | null }
  | { type: "spec"; spec: Spec }
  | { type: "mode"; mode: "form" | "yaml" | "import" }
  | { type: "yaml"; text: string }
  /** an import's spec, already over the schema's defaults (importedSpec) */
  | { type: "imported"; spec: Spec; result: SpecImport };

export const MAX_SEEDS = 16;

/** A fresh form: the schema's defaults on their backend, or a clone's source. */
export function startFrom(spec: Spec, more: Partial<Pick<LauncherState, "name" | "description" | "tags" | "backends">> = {}): LauncherState {
  return {
    spec, name: "", description: "", tags: "", seeds: 1, cluster: undefined, mode: "form", yamlText: "",
    yamlError: null, imported: null, preflight: false, backends: [getPath(spec, "rollout.backend") as Backend].filter(Boolean), ...more,
  };
}

function isObject(v: unknown): v is Spec {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function overlay(base: Spec, over: Spec): Spec {
  const out: Spec = { ...base };
  for (const [k, v] of Object.entries(over)) out[k] = isObject(v) && isObject(base[k]) ? overlay(base[k], v) : v;
  return out;
}

/** An import's spec (only the keys it set) over the schema's defaults for its backend: the
 * whole spec the form edits, as the server would fill it in. */
export function importedSpec(schema: JsonSchema, imported: Spec): Spec {
  const backend = getPath(imported, "rollout.backend") as Backend | undefined;
  return overlay(defaultsOf(schema, schema, backend), imported);
}

/** A new primary backend: its member's defaults, keeping the values both members share. */
export function switchBackend(schema: JsonSchema, spec: Spec, backend: Backend): Spec {
  const fresh = defaultsOf(schema, schema, backend).rollout as Spec;
  const old = (spec.rollout ?? {}) as Spec;
  const rollout: Spec = { ...fresh };
  for (const key of Object.keys(fresh)) if (key in old && key !== "backend") rollout[key] = old[key];
  return { ...spec, rollout };
}

export function launcherReducer(state: LauncherState, action: LauncherAction): LauncherState {
  switch (action.type) {
    case "field":
      return { ...state, [action.field]: action.value };
    case "preflight":
      return { ...state, preflight: action.value };
    case "seeds":
      return { ...state, seeds: Math.min(MAX_SEEDS, Math.max(1, Math.floor(action.value) || 1)) };
    case "cluster":
      return { ...state, cluster: action.value };
    case "toggleBackend": {
      const { backend, schema } = action;
      const backends = state.backends.includes(backend) ? state.backends.filter((b) => b !== backend)
        : [...state.backends, backend];
      const primary = backends[0];
      const spec = schema && primary && primary !== getPath(state.spec, "rollout.backend")
        ? switchBackend(schema, state.spec, primary) : state.spec;
      return { ...state, backends, spec };
    }
    case "spec":
      return { ...state, spec: action.spec };
    case "mode":
      // the YAML view opens on the spec as it is now; the form reads the last parsed spec
      return action.mode === "yaml"
        ? { ...state, mode: "yaml", yamlText: stringify(state.spec), yamlError: null }
        : { ...state, mode: action.mode };
    case "imported": {
      const { spec: _spec, ...report } = action.result;
      const b = getPath(action.spec, "rollout.backend") as Backend | undefined;
      const backends = b ? [b, ...state.backends.filter((x) => x !== b)] : state.backends;
      return { ...state, spec: action.spec, backends, mode: "form", yamlError: null, imported: report };
    }
    case "yaml": {
      let parsed: unknown;
      try {
        parsed = parse(action.text);
      } catch (err) {
        return { ...state, yamlText: action.text, yamlError: (err as Error).message };
      }
      if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) {
        return { ...state, yamlText: action.text, yamlError: "the config must be a mapping of sections" };
      }
      const spec = parsed as Spec;
      // the YAML's rollout.backend becomes the primary backend
      const b = getPath(spec, "rollout.backend") as Backend | undefined;
      const backends = b && state.backends[0] !== b ? [b, ...state.backends.filter((x) => x !== b)] : state.backends;
      return { ...state, yamlText: action.text, yamlError: null, spec, backends };
    }
  }
}

/** The clone's source: the experiment, and the config version whose spec is edited. */
export interface CloneSource { experiment: number; config: number; spec: Spec }

/** A clone's edits as the clone endpoint takes them (dotted path → new value), from the
 * server's diff of the edited spec against the source (POST /configs/diff). A key deleted
 * in the YAML cannot be an edit: the source's value stays. */
export function editsOf(changes: readonly ConfigChange[]): Record<string, unknown> {
  return Object.fromEntries(changes.filter((c) => c.only_in !== "a").map((c) => [c.path, c.b]));
}

/** What to send: a launch of the spec for `team`, or a clone of `clone` with the edits
 * the form made to it (`changes`: the server's diff of the form's spec against the
 * clone's; null while it is asked, and then there is nothing to send yet). */
export function launchBody(state: LauncherState, team: number, cluster: number | null,
  clone: CloneSource | null, changes: readonly ConfigChange[] | null = null): LaunchBody | null {
  const common = {
    name: state.name.trim() || "untitled", description: state.description, seeds: state.seeds,
    backends: state.backends, tags: state.tags.split(",").map((t) => t.trim()).filter(Boolean), cluster,
    validate_only: false, preflight: state.preflight ? "first" as const : "off" as const,
  };
  if (!clone) return { kind: "launch", body: { ...common, team, spec: state.spec } };
  return changes && { kind: "clone", experiment: clone.experiment,
    body: { ...common, config: clone.config, edits: editsOf(changes) } };
}
