// The compare view's config diff, one column per run, built from the server's pairwise
// diffs (GET /configs/diff) of the first column's config against each other one.
import type { ConfigDiff } from "../api/types";

export interface DiffRow {
  path: string;
  /** one per column; undefined where that config lacks the key */
  values: unknown[];
}

/** Every path that differs between any two columns, sorted, with each column's value.
 * `diffs` holds base→other for every other config among `columns` (config ids). A column
 * whose diff lacks a path has the base's value there, which some other diff names. */
export function diffColumns(base: number, columns: readonly number[], diffs: readonly ConfigDiff[]): DiffRow[] {
  const byOther = new Map(diffs.map((d) => [d.b, new Map(d.changes.map((c) => [c.path, c]))]));
  const baseValue = new Map<string, unknown>();
  for (const d of diffs) {
    for (const c of d.changes) baseValue.set(c.path, c.only_in === "b" ? undefined : c.a);
  }
  return [...baseValue.keys()].sort().map((path) => ({
    path,
    values: columns.map((id) => {
      const change = id === base ? undefined : byOther.get(id)?.get(path);
      if (!change) return baseValue.get(path);
      return change.only_in === "a" ? undefined : change.b;
    }),
  }));
}
