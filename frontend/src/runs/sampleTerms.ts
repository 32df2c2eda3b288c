import type { Sample } from "../api/types";

/** The reward terms of a step's samples, in the order the spec lists them (the order of the
 * first sample that has them), for one inspector column each. */
export function termKeys(items: Sample[]): string[] {
  const keys: string[] = [];
  for (const item of items) {
    for (const key of Object.keys(item.terms ?? {})) if (!keys.includes(key)) keys.push(key);
  }
  return keys;
}

/** What a term saw for one sample (extracted answer, parsed gold, token count...), one
 * `key: value` a line, for the cell's tooltip. */
export function termDetails(item: Sample, key: string): string {
  const d = item.details?.[key];
  if (!d) return "";
  return Object.entries(d).map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`).join("\n");
}
