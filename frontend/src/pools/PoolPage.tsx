// A pool (docs/pools.md): the runs of the viewer's teams it hosts, with their shares,
// throughput and memory when the pool job reports them, and how many runs it hosts in all.
// A pool may host other teams' runs; the API never sends them, only their count.
import { Link, useParams } from "react-router";
import { usePool, usePools } from "../api/pools";
import type { Pool, RunState } from "../api/types";
import { formatNumber, timeAgo } from "../lib/format";
import { memoryFigures, membersInOrder, poolTeamLabel, shareLabel } from "../lib/pools";
import { StateBadge } from "../runs/StateBadge";
import { Empty, Query } from "../ui/States";

function PoolTable({ pool }: { pool: Pool }) {
  const members = membersInOrder(pool.members);
  if (!members.length) return <Empty title="None of your runs">This pool hosts none of your teams' runs now.</Empty>;
  return (
    <table className="compact" data-testid="pool-members">
      <thead><tr><th>Run</th><th>Experiment</th><th>Team</th><th>State</th><th>Weight</th><th>Share</th>
        <th>GPUs (quota)</th><th>tok/s</th><th title="trainer time, generation turns (as reported)">Got</th><th>Wait</th><th>Memory</th><th>Joined</th><th>Left</th></tr></thead>
      <tbody>
        {members.map((m) => (
          <tr key={`${m.run}-${m.dispatch}`}>
            <td><Link to={`/runs/${m.run}`}>#{m.run}</Link></td>
            <td>{m.experiment_name}</td>
            <td>{m.team_name}</td>
            <td><StateBadge state={m.state as RunState} /></td>
            <td>{formatNumber(m.weight)}</td>
            <td>{shareLabel(m.share)}</td>
            <td>{formatNumber(m.gpus)}</td>
            <td>{formatNumber(m.latest["throughput/tokens_per_s"])}</td>
            <td className="small">{shareLabel(m.latest["pool/share"])} / {shareLabel(m.latest["pool/gen_share"])}</td>
            <td>{m.latest["pool/wait_s"] === undefined ? "—" : `${formatNumber(m.latest["pool/wait_s"])} s`}</td>
            <td className="small">{memoryFigures(m.latest).map(([k, v]) => `${k} ${formatNumber(v)}`).join(", ") || "—"}</td>
            <td className="muted">{timeAgo(m.joined_at)}</td>
            <td className="muted" title={m.left_reason}>{m.left_at ? timeAgo(m.left_at) : "—"}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function PoolView({ pool }: { pool: Pool }) {
  const team = poolTeamLabel(pool);
  return (
    <section className="pool">
      <header className="run-head">
        <div className="run-title"><h1>Pool {pool.name}</h1><span className="muted">{pool.state}</span></div>
        <div className="run-meta muted">
          {team !== null && <span data-testid="pool-team">{team}</span>}
          <span>cluster {pool.cluster_name}</span>
          <span>{pool.members_total} of {pool.capacity} runs</span>
          <span>{formatNumber(pool.gpus)} GPUs</span>
          <span>dispatch {pool.dispatch_count}</span>
        </div>
      </header>
      <PoolTable pool={pool} />
    </section>
  );
}

function OnePool({ poolId }: { poolId: number }) {
  const one = usePool(poolId);
  return <div className="pool-page"><Query result={one}>{(pool) => <PoolView pool={pool} />}</Query></div>;
}

export default function PoolPage() {
  const poolId = Number(useParams().poolId) || null;
  return poolId ? <OnePool poolId={poolId} /> : <PoolList />;
}

function PoolList() {
  const all = usePools();
  // staff only: the API sends the pool's team to staff sessions alone
  const staff = (pools: Pool[]) => pools.some((p) => poolTeamLabel(p) !== null);
  return (
    <div className="pool-page">
      <h1>Pools</h1>
      <Query result={all} isEmpty={(d) => d.length === 0}
        empty={<Empty title="No pools">Runs with <code>resources.pool</code> share a pool job; none of yours has.</Empty>}>
        {(pools) => (
          <table className="compact" data-testid="pool-list">
            <thead><tr><th>Pool</th>{staff(pools) && <th>Team</th>}<th>State</th><th>Cluster</th><th>Runs</th><th>Your runs</th></tr></thead>
            <tbody>
              {pools.map((p) => (
                <tr key={p.id}>
                  <td><Link to={`/pools/${p.id}`}>{p.name}</Link></td>
                  {staff(pools) && <td>{poolTeamLabel(p) ?? "—"}</td>}
                  <td>{p.state}</td><td>{p.cluster_name}</td>
                  <td>{p.members_total} of {p.capacity}</td>
                  <td>{p.members.filter((m) => !m.left_at).length}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Query>
    </div>
  );
}
