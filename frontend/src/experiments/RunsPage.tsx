// The landing page: the team's experiments and runs, filtered and searched, with state,
// progress and reward updating live over the experiments' streams (no polling).
import { useMemo, useState } from "react";
import { Link, useNavigate, useSearchParams } from "react-router";
import { useExperiments } from "../api/experiments";
import { useExperimentStreams } from "../api/live";
import { useMultiMetrics } from "../api/metrics";
import { useRunPages } from "../api/runs";
import { emptySeries, mergeHistory, type Series } from "../charts/series";
import { BACKENDS, RUN_STATES, type Experiment, type Run } from "../api/types";
import { REWARD_KEY, RunsTable } from "../runs/RunsTable";
import { TERMINAL } from "../runs/states";
import { useSession } from "../session/SessionContext";
import { Empty, ErrorBox, Loading } from "../ui/States";

const MAX_STREAMS = 8;
const SPARK_READ = { keys: [REWARD_KEY], maxPoints: 100, sample: "stride" } as const;

function matches(run: Run, experiment: Experiment | undefined, text: string): boolean {
  if (!text) return true;
  const hay = [`#${run.id}`, String(run.id), run.backend, run.state, experiment?.name ?? "",
    ...(experiment?.tags ?? []), run.created_by?.username ?? ""].join(" ").toLowerCase();
  return text.toLowerCase().split(/\s+/).every((word) => hay.includes(word));
}

export function RunsPage() {
  const { team, can } = useSession();
  const [params, setParams] = useSearchParams();
  const filters = {
    state: params.get("state") ?? "", backend: params.get("backend") ?? "", tag: params.get("tag") ?? "",
    creator: params.get("creator") ?? "", experiment: params.get("experiment") ?? "",
  };
  const [search, setSearch] = useState(params.get("q") ?? "");
  const [selected, setSelected] = useState<ReadonlySet<number>>(new Set());
  const navigate = useNavigate();
  const experiments = useExperiments(team?.id ?? null);
  const runs = useRunPages(team?.id ?? null, filters);

  const experimentById = useMemo(
    () => new Map((experiments.data ?? []).map((e) => [e.id, e])), [experiments.data]);

  // reward sparklines: one request per 20 runs, ~100 evenly spaced steps each (a stride read
  // costs the same for long runs as for short ones), refetched when the set changes
  const runIds = useMemo(() => (runs.data ?? []).map((r) => r.id), [runs.data]);
  const sparkHistory = useMultiMetrics(runIds, SPARK_READ);
  const rewards = useMemo(() => new Map([...sparkHistory].flatMap(([id, m]) =>
    m.has(REWARD_KEY) ? [[id, m.get(REWARD_KEY)!] as const] : [])), [sparkHistory]);

  // live: the experiments that have an active run in view
  const activeExperiments = useMemo(() => [...new Set((runs.data ?? [])
    .filter((r) => !TERMINAL.has(r.state)).map((r) => r.experiment))].slice(0, MAX_STREAMS),
  [runs.data]);
  const live = useExperimentStreams(activeExperiments);

  // the rows carry what the streams said (liveCache.ts)
  const rows = useMemo(() => (runs.data ?? [])
    .filter((r) => matches(r, experimentById.get(r.experiment), search)),
  [runs.data, experimentById, search]);

  // the sparkline: downsampled history with the stream's live points on top
  const sparks = useMemo(() => {
    const out = new Map<number, Series>();
    for (const r of runs.data ?? []) {
      const past = rewards.get(r.id);
      const now = live.runs.get(r.id)?.series.get(REWARD_KEY);
      if (past || now) out.set(r.id, mergeHistory(past ?? emptySeries(), now ?? emptySeries()));
    }
    return out;
  // eslint-disable-next-line react-hooks/exhaustive-deps -- live.version marks new points
  }, [runs.data, rewards, live.version]);

  const set = (key: string, value: string) => {
    const next = new URLSearchParams(params);
    if (value) next.set(key, value); else next.delete(key);
    setParams(next, { replace: true });
  };
  const tags = useMemo(() => [...new Set((experiments.data ?? []).flatMap((e) => e.tags ?? []))].sort(),
    [experiments.data]);

  if (!team) return <Empty title="You are not in a team yet">Ask a team admin to add you.</Empty>;
  return (
    <div className="runs-page">
      <aside className="experiments-list">
        <div className="aside-head">
          <h2>Experiments</h2>
          {can("member") && <Link className="btn small primary" to="/launch">New</Link>}
        </div>
        {experiments.error && <ErrorBox error={experiments.error} onRetry={() => void experiments.refetch()} />}
        {!experiments.data && !experiments.error && <Loading />}
        <ul>
          <li className={!filters.experiment ? "active" : ""}>
            <button className="linklike" onClick={() => set("experiment", "")}>All experiments</button>
          </li>
          {(experiments.data ?? []).map((e) => (
            <li key={e.id} className={filters.experiment === String(e.id) ? "active" : ""}>
              <button className="linklike" onClick={() => set("experiment", String(e.id))} title={e.description}>{e.name}</button>
              {e.run_count !== undefined && (
                <span className={`exp-count ${e.active_run_count ? "active" : ""}`}
                  title={`${e.active_run_count ?? 0} active of ${e.run_count} runs`}>
                  {e.active_run_count ? `${e.active_run_count}/` : ""}{e.run_count}
                </span>
              )}
              <Link className="small" to={`/experiments/${e.id}/compare`} title="Compare backends">compare</Link>
            </li>
          ))}
        </ul>
      </aside>
      <section className="runs-main">
        <div className="filters" role="search">
          <input type="search" placeholder="Search runs (id, experiment, tag, backend…)" value={search}
            onChange={(e) => { setSearch(e.target.value); set("q", e.target.value); }} aria-label="Search runs" />
          <select aria-label="State" value={filters.state} onChange={(e) => set("state", e.target.value)}>
            <option value="">any state</option>
            {RUN_STATES.map((s) => <option key={s}>{s}</option>)}
          </select>
          <select aria-label="Backend" value={filters.backend} onChange={(e) => set("backend", e.target.value)}>
            <option value="">any backend</option>
            {BACKENDS.map((b) => <option key={b}>{b}</option>)}
          </select>
          <select aria-label="Tag" value={filters.tag} onChange={(e) => set("tag", e.target.value)}>
            <option value="">any tag</option>
            {tags.map((t) => <option key={t}>{t}</option>)}
          </select>
          <input aria-label="Creator" placeholder="creator" value={filters.creator} className="narrow"
            onChange={(e) => set("creator", e.target.value)} />
          {selected.size > 0 && (
            <button className="btn small primary" disabled={selected.size < 2}
              onClick={() => navigate(`/compare?runs=${[...selected].sort((a, b) => a - b).join(",")}`)}>
              Compare {selected.size} run{selected.size === 1 ? "" : "s"}
            </button>
          )}
          <span className={`live-dot ${activeExperiments.length && live.status === "live" ? "on" : ""}`}
            title={activeExperiments.length ? `live: ${live.status}` : "no active runs"} />
        </div>
        {runs.error && <ErrorBox error={runs.error} onRetry={() => void runs.refetch()} />}
        {!runs.data && !runs.error && <Loading what="Loading runs" />}
        {runs.data && rows.length === 0 && (
          <Empty title={runs.data.length ? "No run matches" : "No runs yet"}>
            {runs.data.length ? "Change the filters or the search." :
              can("member") ? <Link to="/launch">Launch an experiment</Link> : "Runs appear here once launched."}
          </Empty>
        )}
        {rows.length > 0 && <RunsTable runs={rows} experiments={experimentById} rewards={sparks} selected={selected}
          onSelect={(id, on) => setSelected((s) => { const n = new Set(s); if (on) n.add(id); else n.delete(id); return n; })} />}
        {runs.hasNextPage && (
          <div className="table-foot">
            <ErrorBox error={runs.isFetchNextPageError ? runs.error : null} />
            <button className="btn small" disabled={runs.isFetchingNextPage} onClick={() => void runs.fetchNextPage()}>
              {runs.isFetchingNextPage ? "Loading…" : "Load older runs"}
            </button>
          </div>
        )}
      </section>
    </div>
  );
}
