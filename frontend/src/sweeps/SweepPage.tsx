// A sweep (docs/sweeps.md): every member live, a table of each member's settings and
// metric (the best so far marked), and the parallel-coordinates plot of the settings
// against a chosen metric. The members' runs are the runs of the sweep's experiment, so
// the page listens to that experiment's stream; what the sweep itself decides (a member
// stopped, the next launched) is read again when the stream speaks of a run it does not
// know in that state, and every few seconds while it is unfinished (api/sweeps.ts).
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { Suspense, useEffect, useMemo, useState } from "react";
import { Link, useParams } from "react-router";
import { useExperimentStreams } from "../api/live";
import { queryKeys } from "../api/queryKeys";
import { stopSweep, useSweep, useSweeps } from "../api/sweeps";
import type { RunState, SweepDetail, SweepMemberState } from "../api/types";
import { formatNumber, formatValue, timeAgo } from "../lib/format";
import { preloadable } from "../lib/preloadable";
import { useComparedAlarms } from "../api/alarms";
import { FiringAlarms } from "../runs/Alarms";
import { StateBadge } from "../runs/StateBadge";
import { useSession } from "../session/SessionContext";
import { Empty, ErrorBox, Query } from "../ui/States";
import { metricChoices, metricLabel, plotRows, staleAgainst, withLiveRuns, type MemberRow } from "./sweepRows";

const plot = preloadable(() => import("./ParallelCoordinates"));
const ParallelCoordinates = plot.Component;

const MEMBER_TONE: Record<SweepMemberState, string> = {
  pending: "idle", active: "active", stopping: "transition", stopped: "bad", done: "ok", skipped: "idle",
};

function MemberBadge({ state }: { state: SweepMemberState }) {
  return <span className={`badge tone-${MEMBER_TONE[state]}`} data-testid="member-state" data-state={state}>{state}</span>;
}

function describeRule(sweep: SweepDetail): string {
  const rule = sweep.stopping;
  if (!rule) return "no early stopping";
  return rule.rule === "median"
    ? `median stopping after ${rule.min_steps} steps (${rule.min_members} others)`
    : `stop below ${rule.threshold} after ${rule.min_steps} steps`;
}

function MemberTable({ sweep, rows, keys }: { sweep: SweepDetail; rows: MemberRow[]; keys: string[] }) {
  // the alarms firing on each member's run (docs/alarms.md), kept live by the stream
  const alarms = useComparedAlarms(useMemo(() => ({ experiment: sweep.experiment }), [sweep.experiment]));
  const alarmsOf = new Map((alarms.data?.runs ?? []).map((r) => [r.run_id, r.alarms]));
  return (
    <table className="compact sweep-members" data-testid="sweep-members">
      <thead><tr>
        <th>#</th>{keys.map((k) => <th key={k}><code>{k}</code></th>)}
        <th>Member</th><th>Run</th><th>Step</th>
        <th>{sweep.metric} best</th><th>last</th><th>eval/accuracy</th><th>Alarms</th><th>Why</th>
      </tr></thead>
      <tbody>
        {rows.map((m) => (
          <tr key={m.index} data-testid="sweep-member" data-member={m.index} className={m.isBest ? "best" : undefined}>
            <td>{m.index}</td>
            {keys.map((k) => <td key={k} className="mono">{formatValue(m.settings[k])}</td>)}
            <td><MemberBadge state={m.state} /></td>
            <td>{m.run ? <><Link to={`/runs/${m.run.id}`}>#{m.run.id}</Link>{" "}
              <StateBadge state={m.run.state as RunState} desired={m.run.desired_state} /></> : "—"}</td>
            <td>{m.run ? `${m.run.step}/${m.run.total_steps}` : "—"}</td>
            <td data-testid="member-best">{m.isBest && <span className="best-mark" title="best so far">★ </span>}{formatNumber(m.best)}</td>
            <td>{formatNumber(m.last)}</td>
            <td>{formatNumber(m.run?.latest["eval/accuracy"])}</td>
            <td>{m.run ? <FiringAlarms alarms={alarmsOf.get(m.run.id)} /> : null}</td>
            <td className="muted small" title={m.reason || m.run?.queued_reason}>{m.reason || m.run?.queued_reason || ""}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function SweepView({ sweep }: { sweep: SweepDetail }) {
  const client = useQueryClient();
  const { can } = useSession();
  const stream = useExperimentStreams(useMemo(() => [sweep.experiment], [sweep.experiment]));
  // eslint-disable-next-line react-hooks/exhaustive-deps -- stream.version marks new rows
  const rows = useMemo(() => withLiveRuns(sweep, stream.runs), [sweep, stream.version]);
  // the stream spoke of a member's run in a state (or a run) the answer does not hold yet
  useEffect(() => {
    if (staleAgainst(sweep, stream.runs)) void client.invalidateQueries({ queryKey: queryKeys.sweeps.detail(sweep.id) });
  // eslint-disable-next-line react-hooks/exhaustive-deps -- stream.version marks new rows
  }, [client, sweep, stream.version]);
  const keys = Object.keys(sweep.params);
  const choices = metricChoices(sweep, rows);
  const [choice, setChoice] = useState("best");
  const metric = choices.some((c) => c.value === choice) ? choice : "best";
  const label = metricLabel(sweep, metric);
  const best = rows.find((r) => r.isBest)?.index ?? null;
  const stopping = useMutation({ mutationFn: () => stopSweep(sweep.id) });
  const budget = sweep.budget.gpu_hours ? ` of ${formatNumber(sweep.budget.gpu_hours)}` : "";

  return (
    <section className="sweep">
      <header className="run-head">
        <div className="run-title">
          <h1>Sweep {sweep.name}</h1>
          <span className={`badge tone-${sweep.state === "running" ? "active" : sweep.state === "stopping" ? "transition" : "ok"}`}
            data-testid="sweep-state">{sweep.state}</span>
          {sweep.end_reason && <span className="muted small">{sweep.end_reason}</span>}
        </div>
        <div className="run-controls">
          {sweep.state === "running" && can("member") && (
            <button className="btn danger small" disabled={stopping.isPending} onClick={() => stopping.mutate()}>Stop sweep</button>
          )}
        </div>
        <div className="run-meta muted">
          <span>{sweep.method} over {keys.join(", ")}</span>
          <span>{sweep.budget.members} members, {sweep.parallel} at once</span>
          <span>{sweep.metric} ({sweep.mode})</span>
          <span>{describeRule(sweep)}</span>
          <span>{formatNumber(sweep.gpu_hours)}{budget} GPU-hours</span>
          <Link to={`/?experiment=${sweep.experiment}`}>runs</Link>
          <Link to={`/experiments/${sweep.experiment}/compare`}>compare</Link>
          <span title={sweep.created_at}>{timeAgo(sweep.created_at)}</span>
        </div>
      </header>
      {stopping.error && <ErrorBox error={stopping.error} />}
      <section className="card">
        <div className="row">
          <h2 className="grow">Settings against {label}</h2>
          <label>Metric
            <select aria-label="Plot metric" value={metric} onChange={(e) => setChoice(e.target.value)}>
              {choices.map((c) => <option key={c.value} value={c.value}>{c.label}</option>)}
            </select>
          </label>
        </div>
        <Suspense fallback={<div className="chart-placeholder" style={{ height: 300 }} />}>
          <ParallelCoordinates rows={plotRows(sweep, rows, metric)} keys={keys} metric={label}
            mode={metric === "best" || metric === "last" ? sweep.mode : "max"} best={best} />
        </Suspense>
      </section>
      <section className="card">
        <h2>Members <span className="muted small">live: {stream.status}</span></h2>
        <MemberTable sweep={sweep} rows={rows} keys={keys} />
      </section>
    </section>
  );
}

function OneSweep({ sweepId }: { sweepId: number }) {
  const one = useSweep(sweepId);
  return <div className="sweep-page"><Query result={one}>{(sweep) => <SweepView sweep={sweep} />}</Query></div>;
}

function SweepList() {
  const { team } = useSession();
  const all = useSweeps(team?.id ?? null);
  return (
    <div className="sweep-page">
      <h1>Sweeps</h1>
      <Query result={all} isEmpty={(d) => d.length === 0}
        empty={<Empty title="No sweeps">Launch one from the launcher's sweep section, or <code>paddock sweeps launch</code>.</Empty>}>
        {(sweeps) => (
          <table className="compact" data-testid="sweep-list">
            <thead><tr><th>Sweep</th><th>State</th><th>Method</th><th>Members</th><th>Running</th><th>Stopped early</th><th>Metric</th><th>Created</th></tr></thead>
            <tbody>
              {sweeps.map((s) => (
                <tr key={s.id}>
                  <td><Link to={`/sweeps/${s.id}`}>{s.name}</Link></td>
                  <td>{s.state}</td><td>{s.method}</td><td>{s.budget.members}</td>
                  <td>{s.counts.active + s.counts.stopping}</td><td>{s.counts.stopped}</td>
                  <td>{s.metric} ({s.mode})</td><td className="muted">{timeAgo(s.created_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Query>
    </div>
  );
}

export default function SweepPage() {
  const sweepId = Number(useParams().sweepId) || null;
  return sweepId ? <OneSweep sweepId={sweepId} /> : <SweepList />;
}
