// A sweep's members as the page shows them (pure: sweepRows.test.ts): the REST answer with
// what the experiment's stream said of each member's run since (its state, step and
// latest values), the best member found again over both, the plot's rows for a chosen
// metric, and whether the stream spoke of something the answer does not hold yet.
import type { RunLive } from "../api/liveStore";
import type { SweepDetail, SweepMember } from "../api/types";
import type { Row } from "./parallel";

export type MemberRow = SweepMember & { isBest: boolean };

function better(a: number, b: number, mode: "max" | "min"): boolean {
  return mode === "max" ? a > b : a < b;
}

/** The members with their runs' live rows over the REST ones; `best` also takes the
 * stream's latest value of the metric; the best member marked again. */
export function withLiveRuns(sweep: SweepDetail, runs: ReadonlyMap<number, RunLive>): MemberRow[] {
  const rows = sweep.members.map((m) => {
    const live = m.run ? runs.get(m.run.id) : undefined;
    if (!m.run || !live?.run) return { ...m, isBest: false };
    const latest = { ...m.run.latest, ...live.latest };
    const last = live.latest[sweep.metric] ?? m.last;
    const best = last === null || last === undefined ? m.best
      : m.best === null || m.best === undefined || better(last, m.best, sweep.mode) ? last : m.best;
    return {
      ...m, best, last, isBest: false,
      run: { ...m.run, state: live.run.state, desired_state: live.run.desired_state,
        step: Math.max(m.run.step, live.run.step), latest },
    };
  });
  let top: MemberRow | null = null;
  for (const row of rows) {
    if (row.best === null || row.best === undefined) continue;
    if (!top || better(row.best, top.best as number, sweep.mode)) top = row;
  }
  if (top) top.isBest = true;
  return rows;
}

/** What the plot's metric axis can show: the objective's best and last value, then every
 * other metric the members' runs have a latest value of. */
export function metricChoices(sweep: SweepDetail, rows: MemberRow[]): { value: string; label: string }[] {
  const keys = new Set<string>();
  for (const r of rows) for (const k of Object.keys(r.run?.latest ?? {})) if (k !== sweep.metric) keys.add(k);
  return [
    { value: "best", label: `${sweep.metric} (best)` },
    { value: "last", label: `${sweep.metric} (last)` },
    ...[...keys].sort().map((k) => ({ value: `latest:${k}`, label: k })),
  ];
}

/** The axis name of a choice of metricChoices. */
export function metricLabel(sweep: SweepDetail, choice: string): string {
  if (choice === "best" || choice === "last") return `${sweep.metric} (${choice})`;
  return choice.replace(/^latest:/, "");
}

/** One row of the plot per member: its settings and, under the metric's label, its value. */
export function plotRows(sweep: SweepDetail, rows: MemberRow[], choice: string): Row[] {
  const label = metricLabel(sweep, choice);
  return rows.map((r) => {
    const value = choice === "best" ? r.best : choice === "last" ? r.last : r.run?.latest[choice.replace(/^latest:/, "")];
    return { index: r.index, values: { ...r.settings, [label]: value ?? undefined } };
  });
}

/** Whether the stream reported a run of the experiment the answer does not list (a member
 * launched since) or in another state than it says (one ended, one being stopped). */
export function staleAgainst(sweep: SweepDetail, runs: ReadonlyMap<number, RunLive>): boolean {
  const known = new Map(sweep.members.filter((m) => m.run).map((m) => [m.run!.id, m.run!.state]));
  for (const [id, live] of runs) {
    if (!live.run) continue;
    if (!known.has(id) || known.get(id) !== live.run.state) return true;
  }
  return false;
}
