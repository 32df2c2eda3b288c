import { useMemo, useState } from "react";
import { Link } from "react-router";
import type { Experiment, Run } from "../api/types";
import { etaFromSeries, type Series } from "../charts/series";
import { BACKEND_COLOR } from "../charts/palette";
import { formatNumber, timeAgo } from "../lib/format";
import { BackendTag, StateBadge } from "./StateBadge";
import { Progress } from "./Progress";
import { Sparkline } from "./Sparkline";

export const REWARD_KEY = "reward/mean";

type SortKey = "id" | "experiment" | "state" | "backend" | "progress" | "reward";

function lastReward(run: Run, reward: Series | undefined): number | undefined {
  return run.latest?.[REWARD_KEY] ?? (reward?.value.length ? reward.value[reward.value.length - 1] : undefined);
}

export function RunsTable({ runs, experiments, rewards, selected, onSelect }: {
  runs: Run[];
  experiments: Map<number, Experiment>;
  /** reward/mean history per run (downsampled), for the sparkline */
  rewards: Map<number, Series>;
  /** runs ticked for a comparison */
  selected: ReadonlySet<number>;
  onSelect: (runId: number, on: boolean) => void;
}) {
  const [sort, setSort] = useState<{ key: SortKey; desc: boolean }>({ key: "id", desc: true });
  const sorted = useMemo(() => {
    const value = (r: Run): number | string => {
      switch (sort.key) {
        case "id": return r.id;
        case "experiment": return experiments.get(r.experiment)?.name ?? "";
        case "state": return r.state;
        case "backend": return r.backend;
        case "progress": return r.total_steps ? r.step / r.total_steps : 0;
        case "reward": return lastReward(r, rewards.get(r.id)) ?? -Infinity;
      }
    };
    const out = [...runs].sort((a, b) => {
      const va = value(a);
      const vb = value(b);
      return (va < vb ? -1 : va > vb ? 1 : b.id - a.id) * (sort.desc ? -1 : 1);
    });
    return out;
  }, [runs, sort, experiments, rewards]);
  const header = (key: SortKey, label: string, className = "") => (
    <th className={`sortable ${className}`} aria-sort={sort.key === key ? (sort.desc ? "descending" : "ascending") : "none"}>
      <button className="linklike" onClick={() => setSort((s) => ({ key, desc: s.key === key ? !s.desc : key !== "experiment" && key !== "backend" && key !== "state" }))}>
        {label}{sort.key === key ? (sort.desc ? " ▾" : " ▴") : ""}
      </button>
    </th>
  );
  return (
    <div className="table-scroll">
      <table className="runs-table" data-testid="runs-table">
        <thead>
          <tr>
            <th className="col-check"><span className="sr-only">Select</span></th>
            {header("id", "Run")}{header("experiment", "Experiment")}{header("state", "State")}{header("backend", "Backend")}
            {header("progress", "Progress", "col-progress")}{header("reward", "Reward", "num")}
            <th className="col-spark" /><th>Tags</th><th>Creator</th><th>Created</th>
          </tr>
        </thead>
        <tbody>
          {sorted.map((run) => {
            const experiment = experiments.get(run.experiment);
            const reward = rewards.get(run.id);
            const last = lastReward(run, reward);
            return (
              <tr key={run.id} data-run-id={run.id} className={selected.has(run.id) ? "selected" : ""}>
                <td className="col-check"><input type="checkbox" aria-label={`select run ${run.id}`}
                  checked={selected.has(run.id)} onChange={(e) => onSelect(run.id, e.target.checked)} /></td>
                <td className="col-run"><Link to={`/runs/${run.id}`} className="run-link">#{run.id}</Link>
                  <span className="muted small run-seed">seed {run.seed}</span></td>
                <td className="ellipsis col-experiment" title={experiment?.description}>
                  {experiment?.name ?? run.experiment_name ?? `experiment ${run.experiment}`}
                </td>
                <td><StateBadge state={run.state} desired={run.desired_state} /></td>
                <td><BackendTag backend={run.backend} />{run.purpose === "preflight" &&
                  <span className="badge tone-idle small" title="a pre-flight check of the experiment's spec">pre-flight</span>}</td>
                <td className="col-progress"><Progress step={run.step} total={run.total_steps}
                  startedAt={run.started_at} state={run.state} secondsLeft={etaFromSeries(reward, run.total_steps)} /></td>
                <td className="num" data-testid="last-reward">{formatNumber(last)}</td>
                <td className="col-spark"><Sparkline values={reward?.value ?? []}
                  color={BACKEND_COLOR[run.backend] ?? undefined} /></td>
                <td className="col-tags">{(experiment?.tags ?? []).map((t) => <span key={t} className="tag">{t}</span>)}</td>
                <td className="muted">{run.created_by?.username ?? "—"}</td>
                <td className="muted nowrap" title={run.created_at}>{timeAgo(run.created_at)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
