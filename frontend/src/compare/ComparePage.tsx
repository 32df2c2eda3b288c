// The signature view: one experiment's runs overlaid per backend (mean over seeds with a
// band, each seed faint), a small panel per metric, the divergence of the backends' reward
// with a verdict, each engine judged against its own trainer (token_mult_prob_error and
// gen_kl_error, with a verdict of their own), the alarms firing on each run, and the
// config diff of only the keys that differ. Live over the experiment's stream.
import { useQueries } from "@tanstack/react-query";
import { useCallback, useMemo, useState } from "react";
import { Link, useParams, useSearchParams } from "react-router";
import { useExperiment } from "../api/experiments";
import { useExperimentStreams } from "../api/live";
import type { CompareSource } from "../api/metrics";
import { allAnswers } from "../api/queryClient";
import { runQuery, useExperimentRuns } from "../api/runs";
import type { Backend } from "../api/types";
import { Chart, preloadCharts } from "../charts/LazyChart";
import type { ChartProps } from "../charts/chartTypes";
import { BACKEND_COLOR } from "../charts/palette";
import { emptySeries, mergeHistory, type Series } from "../charts/series";
import { alignSeries } from "../charts/transforms";
import { BackendTag, StateBadge } from "../runs/StateBadge";
import { ChartToolbar, useChartView } from "../runs/ChartToolbar";
import { Empty, ErrorBox, Loading } from "../ui/States";
import { comparePanel, engineColumns, groupByBackend, seedColumns, type RunSeries } from "./compareData";
import { COMPARE_KEYS, COMPARE_PANELS, FIRST_KEY, useCompareHistory, type StepWindow } from "./compareHistory";
import { ConfigDiffTable } from "./ConfigDiffTable";
import { DEFAULT_DIVERGENCE, divergence, divergenceRule, engineVerdict, judgeEngine, verdict } from "./divergence";
import { useComparedAlarms } from "../api/alarms";
import { ALARM_LIMITS } from "../api/names.gen";
import { FiringAlarms } from "../runs/Alarms";
import { PreflightPanel } from "../runs/Preflight";
import { formatNumber } from "../lib/format";

const REWARD = FIRST_KEY;
const TMPE = "token_mult_prob_error"; // drawn in the divergence row, with gen_kl_error
const ENGINE_PANELS = [TMPE, "gen_kl_error"];

preloadCharts(); // this page always draws: fetch uPlot beside the data, not after it

export default function ComparePage() {
  const params = useParams();
  const [search] = useSearchParams();
  const experimentId = params.experimentId ? Number(params.experimentId) : null;
  const onlyRuns = search.get("runs")?.split(",").map(Number).filter((n) => n > 0);
  // the history is read straight from the experiment (or the ids in the URL), first and
  // beside the runs list rather than after it (the server answers in order); small multiples
  // ~400 px wide: 1,000 points a line
  const source: CompareSource | null = experimentId ? { experiment: experimentId }
    : onlyRuns?.length ? { runs: onlyRuns } : null;
  // the drag-zooms on the step axis, by panel key (each read for every run at full
  // resolution), of this source
  const sourceId = JSON.stringify(source);
  const [zooms, setZooms] = useState<{ of: string; byKey: Record<string, StepWindow> }>({ of: sourceId, byKey: {} });
  const windows = useMemo(() => (zooms.of === sourceId ? Object.values(zooms.byKey) : []), [zooms, sourceId]);
  const { history, stage, error: historyError, painted } = useCompareHistory(source, COMPARE_KEYS, windows);
  const experiment = useExperiment(experimentId);
  // an experiment's runs, or runs chosen one by one (?runs=1,2,3) from anywhere
  const experimentRuns = useExperimentRuns(experimentId);
  const chosenRuns = useQueries({
    queries: (!experimentId && onlyRuns ? onlyRuns : []).map((id) => runQuery(id)),
    combine: allAnswers,
  });
  const runsQuery = experimentId ? { data: experimentRuns.data, error: experimentRuns.error,
    retry: () => void experimentRuns.refetch() }
    : { data: onlyRuns ? chosenRuns.data : undefined, error: chosenRuns.error, retry: undefined };
  // the runs that train (an experiment's pre-flight runs report a verdict, no curves)
  const runs = useMemo(() => [...(runsQuery.data ?? [])].filter((r) => r.purpose !== "preflight")
    .sort((a, b) => a.id - b.id), [runsQuery.data]);
  const [view, setView] = useChartView();
  // live over the streams of every experiment in view (one, or those of the chosen runs),
  // opened once the first history is drawn: their snapshots would queue before it on the server
  const live = useExperimentStreams(!painted ? []
    : experimentId ? [experimentId] : [...new Set(runs.map((r) => r.experiment))]);

  const runSeries = useMemo<RunSeries[]>(() => runs.map((r) => {
    const past = history?.get(r.id) ?? new Map<string, Series>();
    const now = live.runs.get(r.id)?.series ?? new Map<string, Series>();
    const merged = new Map<string, Series>();
    for (const key of new Set([...past.keys(), ...now.keys()])) {
      merged.set(key, mergeHistory(past.get(key) ?? emptySeries(), now.get(key) ?? emptySeries()));
    }
    return { runId: r.id, backend: r.backend, seed: r.seed, series: merged };
  // eslint-disable-next-line react-hooks/exhaustive-deps -- live.version marks new points
  }), [runs, history, live.version]);

  // on the step axis a drag-zoom re-reads that window of the panel's key for every run at
  // full resolution (x_min/x_max by step; the time and tokens axes keep the overview)
  const zoomTo = useCallback((key: string, range: [number, number] | null) => {
    if (!range || view.axis !== "step") return;
    setZooms((z) => ({ of: sourceId, byKey: { ...(z.of === sourceId ? z.byKey : {}),
      [key]: { key, from: Math.floor(range[0]), to: Math.ceil(range[1]) } } }));
  }, [view.axis, sourceId]);

  const panels = useMemo(() => COMPARE_PANELS.map(([title, key]) => ({
    ...comparePanel(title, key, runSeries, view, `compare-${experimentId}`),
    onZoom: (range: [number, number] | null) => zoomTo(key, range),
  })), [runSeries, view, experimentId, zoomTo]);

  const backends = useMemo(() => [...groupByBackend(runSeries).keys()], [runSeries]);
  // each engine against its own trainer, by the alarms' thresholds
  const engines = useMemo(() => backends.map((b) => judgeEngine(engineColumns(runSeries, b), ALARM_LIMITS)),
    [backends, runSeries]);
  const alarms = useComparedAlarms(source);
  const alarmsOf = new Map((alarms.data?.runs ?? []).map((r) => [r.run_id, r.alarms]));
  const [pair, setPair] = useState<[Backend, Backend] | null>(null);
  const [a, b] = pair && backends.includes(pair[0]) && backends.includes(pair[1]) ? pair : [backends[0], backends[1]];

  const div = useMemo(() => {
    if (!a || !b) return null;
    const cols = seedColumns(runSeries, a, b, REWARD);
    const steps = cols.steps;
    const d = divergence(steps, cols.a, cols.b);
    const chart: ChartProps = {
      title: `Reward difference ${a} − ${b}`,
      data: alignSeries([{ x: steps, y: d.diff }, { x: steps, y: d.hi }, { x: steps, y: d.lo }, { x: steps, y: d.mean }]),
      series: [
        { label: "per step", color: "#555555", faint: true },
        { label: "upper", color: "#cc79a7", hidden: true, faint: true, width: 0 },
        { label: "lower", color: "#cc79a7", hidden: true, faint: true, width: 0 },
        { label: `${DEFAULT_DIVERGENCE.window}-step mean (95% CI)`, color: "#cc79a7", width: 2 },
      ],
      bands: [{ upper: 2, lower: 3, color: "#cc79a7" }],
      xKind: "step", syncKey: `compare-${experimentId}`,
    };
    return { d, chart, text: verdict(a, b, d), rule: divergenceRule(d.method) };
  }, [a, b, runSeries, experimentId]);

  if (!experimentId && !onlyRuns) return <Empty title="Pick what to compare">From the runs page, choose “compare” beside an experiment, or tick runs and compare them.</Empty>;
  if (experiment.error) return <ErrorBox error={experiment.error} onRetry={() => void experiment.refetch()} />;
  if (runsQuery.error) return <ErrorBox error={runsQuery.error} onRetry={runsQuery.retry} />;
  if (!runsQuery.data) return <Loading what="Loading runs" />;
  if (!runs.length) return <Empty title="No runs to compare" />;

  return (
    <div className="compare-page" data-stage={stage}>
      <header className="compare-head">
        <h1>{experimentId ? experiment.data?.name ?? "Compare" : `Compare ${runs.length} runs`}{" "}
          <span className="muted small">{experimentId ? "compare backends" : "across experiments"}</span></h1>
        <div className="compare-runs">
          {runs.map((r) => (
            <Link key={r.id} to={`/runs/${r.id}`} className="run-chip" style={{ borderColor: BACKEND_COLOR[r.backend] }}>
              #{r.id} <BackendTag backend={r.backend} /> s{r.seed} <StateBadge state={r.state} desired={r.desired_state} />
              {alarmsOf.get(r.id)?.some((x) => x.firing) && <FiringAlarms alarms={alarmsOf.get(r.id)} />}
            </Link>
          ))}
          <span className={`live-dot ${live.status === "live" ? "on" : ""}`} title={`stream: ${live.status}`} />
        </div>
      </header>

      {experimentId && <PreflightPanel experimentId={experimentId} />}
      {div && (
        <div className={`verdict ${div.d.divergesFrom !== null ? "bad" : div.d.agreeWithin !== null ? "ok" : ""}`} data-testid="verdict">
          {div.text}
          {backends.length > 2 && (
            <span className="pair">
              <select aria-label="first backend" value={a} onChange={(e) => setPair([e.target.value as Backend, b])}>
                {backends.map((x) => <option key={x}>{x}</option>)}</select> vs{" "}
              <select aria-label="second backend" value={b} onChange={(e) => setPair([a, e.target.value as Backend])}>
                {backends.map((x) => <option key={x}>{x}</option>)}</select>
            </span>
          )}
        </div>
      )}
      {div && <p className="muted small divergence-rule" data-testid="divergence-rule">{div.rule}</p>}
      {engines.some((e) => e.verdict) && (
        <div className={`verdict engines ${engines.some((e) => e.verdict === "drifts") ? "bad" : engines.every((e) => !e.verdict || e.verdict === "matches") ? "ok" : ""}`}
          data-testid="engine-verdict">
          <ul>{engines.map((e) => <li key={e.backend} data-backend={e.backend} data-verdict={e.verdict ?? ""}>{engineVerdict(e, ALARM_LIMITS)}</li>)}</ul>
          <table className="compact engine-spread" data-testid="engine-spread">
            <thead><tr><th>Engine</th><th>runs</th><th colSpan={3}>token_mult_prob_error median / p90 / max</th>
              <th colSpan={3}>gen_kl_error median / p90 / max</th></tr></thead>
            <tbody>{engines.map((e) => (
              <tr key={e.backend}><td><BackendTag backend={e.backend as Backend} /></td><td>{e.runs}</td>
                {[e.tmpe, e.genKl].flatMap((sp, i) => sp ? [sp.median, sp.p90, sp.max].map((v, j) =>
                  <td key={`${i}${j}`} className="mono">{formatNumber(v, i === 0 ? 6 : 3)}</td>)
                  : [<td key={i} colSpan={3} className="muted">—</td>])}
              </tr>))}</tbody>
          </table>
          <p className="muted small">Each engine against its own trainer, for the same adapter version: it drifts when
            the median over its runs, over {ALARM_LIMITS.window} steps, stays above {ALARM_LIMITS.prob_error_limit} (token_mult_prob_error)
            or {ALARM_LIMITS.gen_kl_limit} (gen_kl_error) for {ALARM_LIMITS.persist} steps to the latest: the alarm prob_error_drift.</p>
        </div>
      )}
      {backends.length < 2 && <div className="verdict muted">One backend only: launch the same config on another to compare.</div>}

      <ChartToolbar view={view} onChange={setView} />
      {historyError && <ErrorBox error={historyError} />}
      {!history && !historyError && <Loading what="Loading metrics" />}
      {/* the divergence: the reward difference with its band, and each backend's
          token_mult_prob_error (how far the engine's and the trainer's token
          probabilities drift apart), side by side */}
      <section className="chart-grid small-multiples divergence" data-testid="divergence" aria-label="Divergence">
        {div && <Chart {...div.chart} height={170} />}
        {panels.filter((p) => ENGINE_PANELS.includes(p.title)).map((p) => <Chart key={p.title} {...p} height={170} />)}
      </section>
      <div className="chart-grid small-multiples">
        {panels.filter((p) => !ENGINE_PANELS.includes(p.title)).map((p) => <Chart key={p.title} {...p} height={170} />)}
      </div>

      <section className="card wide">
        <h2>Config diff <span className="muted small">only the keys that differ</span></h2>
        <ConfigDiffTable runs={runs} />
      </section>
    </div>
  );
}
