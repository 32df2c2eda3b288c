// A clone's edits: the dotted paths where the edited spec differs from its source, as the
// clone endpoint takes them (`edits`) and as the launcher shows them before launch. GET
// /configs/diff compares two stored versions; an edit in progress is stored nowhere yet, so
// this one comparison is made here, by the server's rule and in its shape (spec_diff of
// platform/paddock/experiments/configs.py: nested objects walked to their leaves, lists and
// empty objects compared whole, a key on one side only named by `only_in`).
import type { ConfigChange } from "../api/types";

function flatten(value: unknown, prefix: string, out: Map<string, unknown>): Map<string, unknown> {
  if (value && typeof value === "object" && !Array.isArray(value) && Object.keys(value).length) {
    for (const [key, child] of Object.entries(value)) flatten(child, prefix ? `${prefix}.${key}` : key, out);
  } else {
    out.set(prefix, value);
  }
  return out;
}

/** The paths whose values differ between `a` and `b`, sorted. */
export function specChanges(a: object, b: object): ConfigChange[] {
  const flatA = flatten(a, "", new Map());
  const flatB = flatten(b, "", new Map());
  const changes: ConfigChange[] = [];
  for (const path of [...new Set([...flatA.keys(), ...flatB.keys()])].sort()) {
    const inA = flatA.has(path);
    const inB = flatB.has(path);
    const va = flatA.get(path);
    const vb = flatB.get(path);
    if (inA && inB && JSON.stringify(va) === JSON.stringify(vb)) continue;
    changes.push({ path, a: inA ? va : null, b: inB ? vb : null, ...(inA && inB ? {} : { only_in: inA ? "a" : "b" }) });
  }
  return changes;
}

/** dotted path → new value, for the clone endpoint; a key deleted in the YAML cannot be
 * expressed as an edit: the source's value stays. */
export function editsOf(changes: readonly ConfigChange[]): Record<string, unknown> {
  return Object.fromEntries(changes.filter((c) => c.only_in !== "a").map((c) => [c.path, c.b]));
}
