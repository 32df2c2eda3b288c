// The diff of two configs, only the keys that differ (MLflow #5896: people want exactly
// this, not two full configs side by side). Nested objects are walked; lists compare whole.

export interface DiffEntry {
  path: string;
  values: unknown[];
}

export function flatten(value: unknown, prefix = "", out: Map<string, unknown> = new Map()) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    const entries = Object.entries(value as Record<string, unknown>);
    for (const [key, child] of entries) flatten(child, prefix ? `${prefix}.${key}` : key, out);
  } else if (prefix) {
    out.set(prefix, value);
  }
  return out;
}

function same(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** Keys (dotted paths) whose values differ between any of `configs`, sorted; a key missing
 * from a config shows as undefined there. */
export function configDiff(configs: readonly unknown[]): DiffEntry[] {
  const flats = configs.map((c) => flatten(c));
  const keys = new Set<string>();
  flats.forEach((f) => f.forEach((_, k) => keys.add(k)));
  const out: DiffEntry[] = [];
  for (const path of [...keys].sort()) {
    const values = flats.map((f) => f.get(path));
    if (values.some((v) => !same(v, values[0]))) out.push({ path, values });
  }
  return out;
}

export function formatValue(v: unknown): string {
  if (v === undefined) return "—";
  if (typeof v === "string") return v;
  return JSON.stringify(v);
}
