// Why a metric has no points, or only a constant, when the run's configuration is the reason
// (the KL panel of a run without a KL term says "kl_coef is 0", not "no points yet"). One
// rule per reason, read from the run's stored spec (workers/spec.py field names; a stored
// spec is normalized, every default written, but older ones may lack a field, so each rule
// falls back to spec.py's default). A rule speaks only when the data look as it says (no
// points, only zeros, a few points): a reason beside a curve that contradicts it would be
// worse than none. Pure: tested without rendering.

type Spec = Record<string, unknown>;

/** The value at a dotted path of the spec, or `fallback` when it is absent. */
export function specValue(spec: Spec, path: string, fallback: unknown): unknown {
  let node: unknown = spec;
  for (const part of path.split(".")) {
    if (node === null || typeof node !== "object" || !(part in node)) return fallback;
    node = (node as Record<string, unknown>)[part];
  }
  return node === undefined ? fallback : node;
}

// reward terms that decide correctness (workers/rewards/verifiers.py, math_verify_term.py);
// a service term is one when it has a correct_threshold (workers/rewards/service.py)
const VERIFIER_TERMS = new Set(["exact_match", "numeric_match", "gsm8k", "boxed_match", "math_verify"]);

function hasVerifier(spec: Spec): boolean {
  const terms = specValue(spec, "reward.functions", [{ name: "exact_match" }]);
  if (!Array.isArray(terms)) return true; // unknown shape: claim nothing
  return terms.some((t) => {
    const term = (t ?? {}) as Record<string, unknown>;
    if (term.name === "service") return term.correct_threshold !== null && term.correct_threshold !== undefined;
    return typeof term.name !== "string" || VERIFIER_TERMS.has(term.name);
  });
}

/** What a key's values look like when the rule's reason holds. */
type Shape = "absent" | "zeros" | "few";

function looks(shape: Shape, values: readonly number[] | undefined): boolean {
  const v = values ?? [];
  if (shape === "absent") return v.length === 0;
  if (shape === "zeros") return v.every((x) => x === 0);
  return v.length <= 2;
}

interface Rule {
  keys: readonly string[];
  /** how the keys' values look when the reason holds */
  shape: Shape;
  /** the reason these keys are off (absent or constant) under this spec, else null */
  why: (spec: Spec) => string | null;
}

export const RULES: readonly Rule[] = [
  {
    // workers/grpo/loss.py computes kl and loss/kl only when kl_coef > 0
    keys: ["kl", "loss/kl"],
    shape: "absent",
    why: (s) => (Number(specValue(s, "algorithm.kl_coef", 0)) === 0 ? "kl_coef is 0 (no KL term in the loss)" : null),
  },
  {
    // accuracy counts verifier verdicts; shaping terms give none (NaN, left out)
    keys: ["accuracy"],
    shape: "absent",
    why: (s) => (hasVerifier(s) ? null : "no verifier term in reward.functions (accuracy needs one)"),
  },
  {
    // the driver scores eval/accuracy at the start, every eval_every steps and at the end
    keys: ["eval/accuracy"],
    shape: "few",
    why: (s) => (Number(specValue(s, "train.eval_every", 10)) === 0 ? "eval_every is 0 (scored at the start and the end only)" : null),
  },
  {
    // a synchronous run trains every group on the adapter that generated it
    keys: ["staleness/mean", "staleness/max", "staleness/dropped_groups"],
    shape: "zeros",
    why: (s) => (specValue(s, "async.enabled", false) === true ? null : "async is off (staleness is always 0)"),
  },
];

/** Why some keys of a panel are off under this spec: one line per distinct reason, each
 * naming its keys when the panel has others; null when nothing is off, the data do not look
 * as the reason says, or no spec is known. `values` gives a key's values (none: no points). */
export function panelReason(keys: readonly string[], spec: Spec | null | undefined,
  values: (key: string) => readonly number[] | undefined = () => undefined): string | null {
  if (!spec) return null;
  const reasons: string[] = [];
  for (const rule of RULES) {
    const hit = keys.filter((k) => rule.keys.includes(k) && looks(rule.shape, values(k)));
    if (!hit.length) continue;
    const why = rule.why(spec);
    if (!why) continue;
    reasons.push(hit.length === keys.length ? why : `${hit.join(", ")}: ${why}`);
  }
  return reasons.length ? reasons.join("; ") : null;
}
