// The launcher's sweep section as typed (strings, as the inputs hold them), and the body
// of POST /sweeps it makes (pure: sweepDraft.test.ts). Values read as the CLI reads them
// (paddock sweeps launch --param): "8, 16" is a list (each value as JSON reads it, else
// the text), "[log:][int:]MIN..MAX" a range for a random search.
import type { SweepCreateRequest } from "../api/types";

export interface ParamRow { key: string; values: string }

export interface SweepDraft {
  method: "grid" | "random";
  params: ParamRow[];
  /** a random search's draws (a grid's default: its size) */
  members: string;
  parallel: string;
  gpuHours: string;
  metric: string;
  mode: "max" | "min";
  rule: "none" | "median" | "threshold";
  minSteps: string;
  minMembers: string;
  threshold: string;
}

export function newDraft(): SweepDraft {
  return {
    method: "grid", params: [{ key: "lora.r", values: "8, 16" }, { key: "train.lr", values: "0.001, 0.003" }],
    members: "", parallel: "", gpuHours: "", metric: "reward/mean", mode: "max", rule: "median",
    minSteps: "10", minMembers: "", threshold: "",
  };
}

type Scalar = number | string | boolean | null;
export type ParamValue = Scalar[] | { min: number; max: number; log: boolean; int: boolean };

const RANGE = /^((?:(?:log|int):)*)([^.:][^:]*?)\.\.([^.].*)$/;

function scalar(text: string): Scalar {
  try {
    const value: unknown = JSON.parse(text);
    if (value === null || ["number", "string", "boolean"].includes(typeof value)) return value as Scalar;
  } catch {
    // not JSON: the text itself (grpo, rloo)
  }
  return text;
}

/** A param's values as typed, or the reason they do not read. */
export function parseValues(text: string): ParamValue | string {
  const trimmed = text.trim();
  if (!trimmed) return "give values (8, 16) or a range (1e-4..1e-2)";
  const range = RANGE.exec(trimmed);
  if (range) {
    const flags = range[1].split(":");
    const [min, max] = [scalar(range[2].trim()), scalar(range[3].trim())];
    if (typeof min !== "number" || typeof max !== "number") return `${trimmed}: a range is of numbers`;
    return { min, max, log: flags.includes("log"), int: flags.includes("int") };
  }
  return trimmed.split(",").map((v) => scalar(v.trim()));
}

function number(text: string): number | undefined {
  const value = Number(text.trim());
  return text.trim() && Number.isFinite(value) ? value : undefined;
}

export interface SweepBase {
  team: number; name: string; description: string; tags: string[];
  spec: Record<string, unknown>; cluster: number | null;
}

/** The request, and what is wrong with the draft before the server is asked (by field,
 * as the server names them: params.<key>, budget.members, early_stopping.min_steps…). */
export function sweepRequest(draft: SweepDraft, base: SweepBase): { body: SweepCreateRequest | null; errors: Record<string, string> } {
  const errors: Record<string, string> = {};
  const params: Record<string, ParamValue> = {};
  for (const row of draft.params) {
    const key = row.key.trim();
    if (!key) continue;
    const parsed = parseValues(row.values);
    if (typeof parsed === "string") errors[`params.${key}`] = parsed;
    else if (key in params) errors[`params.${key}`] = "listed twice";
    else params[key] = parsed;
  }
  if (!Object.keys(params).length && !Object.keys(errors).length) errors.params = "give at least one key to search over";
  const members = number(draft.members);
  const gpuHours = number(draft.gpuHours);
  const parallel = number(draft.parallel);
  const budget: { members?: number; gpu_hours?: number } = {};
  if (members !== undefined) budget.members = members;
  if (gpuHours !== undefined) budget.gpu_hours = gpuHours;
  if (draft.method === "random" && members === undefined) errors["budget.members"] = "a random search needs a number of members";
  let earlyStopping: SweepCreateRequest["early_stopping"] = null;
  if (draft.rule !== "none") {
    const minSteps = number(draft.minSteps);
    if (minSteps === undefined) errors["early_stopping.min_steps"] = "a number of steps";
    earlyStopping = { rule: draft.rule, min_steps: minSteps ?? 0 };
    if (draft.rule === "median" && number(draft.minMembers) !== undefined) earlyStopping.min_members = number(draft.minMembers);
    if (draft.rule === "threshold") {
      const threshold = number(draft.threshold);
      if (threshold === undefined) errors["early_stopping.threshold"] = "the value a member must reach";
      earlyStopping.threshold = threshold;
    }
  }
  if (Object.keys(errors).length) return { body: null, errors };
  return {
    errors,
    body: {
      ...base, method: draft.method, params, budget, metric: draft.metric.trim() || "reward/mean", mode: draft.mode,
      early_stopping: earlyStopping, ...(parallel !== undefined ? { parallel } : {}), validate_only: false,
    },
  };
}
