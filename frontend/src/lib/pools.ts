// What the pool views show, as pure functions: a share as a percentage, the pool line of a
// run page, and the memory figures a pool job reports (metric keys under memory/).
import type { Pool, PoolMember, RunPool } from "../api/types";

export function shareLabel(share: number | null | undefined): string {
  if (share === null || share === undefined || !Number.isFinite(share)) return "—";
  const pct = share * 100;
  return `${pct >= 10 || pct === 0 ? Math.round(pct) : pct.toFixed(1)} %`;
}

/** "pool x · share 50 % · 1 of your runs, 3 in all" (the others are only counted). */
export function runPoolLine(pool: RunPool): string {
  const mine = pool.members_of_your_team.length;
  const share = pool.left_at ? "left" : `share ${shareLabel(pool.share)}`;
  return `pool ${pool.name} · ${share} · ${mine} of your team's runs, ${pool.members_total} in all`;
}

/** The pool's team as staff see it ("auto: no team" for an auto pool); null when the API did
 * not send it (anyone but staff: named pools of several teams may share a name, and which
 * team a pool is of is for staff only). */
export function poolTeamLabel(pool: Pick<Pool, "team" | "team_name">): string | null {
  if (pool.team === undefined) return null;
  return pool.team === null ? "auto: no team" : (pool.team_name ?? `team ${pool.team}`);
}

export const MEMORY_PREFIX = "memory/";

/** The member's memory figures, by name without the prefix, sorted. */
export function memoryFigures(latest: Record<string, number>): [string, number][] {
  return Object.entries(latest)
    .filter(([k, v]) => k.startsWith(MEMORY_PREFIX) && Number.isFinite(v))
    .map(([k, v]): [string, number] => [k.slice(MEMORY_PREFIX.length), v])
    .sort(([a], [b]) => a.localeCompare(b));
}

/** Current members first (by share, largest first), then those that left, newest first. */
export function membersInOrder(members: readonly PoolMember[]): PoolMember[] {
  return [...members].sort((a, b) => {
    if (!a.left_at !== !b.left_at) return a.left_at ? 1 : -1;
    if (!a.left_at) return (b.share ?? 0) - (a.share ?? 0) || a.run - b.run;
    return Date.parse(b.left_at ?? "") - Date.parse(a.left_at ?? "");
  });
}
