// One run, live: its state and controls, the metric charts fed by the websocket on top of
// the downsampled history (a panel for every stored key, the curated ones first, the rest
// grouped by prefix), the log tail, checkpoints, samples and config.
import { useCallback, useMemo, useState } from "react";
import { Link, useParams } from "react-router";
import { useRunStream } from "../api/live";
import { useConfig } from "../api/experiments";
import { useRunMetrics, useRunWindows, type RunWindow } from "../api/metrics";
import { useRun } from "../api/runs";
import { mergeSampleSets, type LogLine } from "../api/liveStore";
import { Chart } from "../charts/LazyChart";
import { panelChart, runPanelGroups, TOKENS_KEY } from "../charts/panels";
import { emptySeries, etaFromSeries, mergeHistory, type Series } from "../charts/series";
import { timeWindow } from "../charts/transforms";
import { formatNumber } from "../lib/format";
import { runPoolLine } from "../lib/pools";
import { useSession } from "../session/SessionContext";
import { ErrorBox, Loading } from "../ui/States";
import { Checkpoints } from "./Checkpoints";
import { ConfigView } from "./ConfigView";
import { LogTail } from "./LogTail";
import { Progress } from "./Progress";
import { RunAlarms } from "./Alarms";
import { PreflightPanel } from "./Preflight";
import { RunControls } from "./RunControls";
import { useOlderLogs, useSampleHistory } from "./runHistory";
import { SampleInspector } from "./SampleInspector";
import { BackendTag, StateBadge } from "./StateBadge";
import { ChartToolbar, useChartView } from "./ChartToolbar";

type Tab = "logs" | "checkpoints" | "samples" | "config";

const NO_ZOOMS: Record<string, RunWindow> = {};

export default function RunPage() {
  const runId = Number(useParams().runId);
  const { can } = useSession();
  const run = useRun(runId);
  const live = useRunStream(runId);
  const [view, setView] = useChartView();
  const { history, error: historyError } = useRunMetrics(runId);
  // the zoomed windows, by panel: each read at full resolution and drawn over the history
  const [zoom, setZoom] = useState<{ runId: number; byPanel: Record<string, RunWindow> }>(
    { runId, byPanel: NO_ZOOMS });
  const zooms = zoom.runId === runId ? zoom.byPanel : NO_ZOOMS;
  const zoomed = useRunWindows(runId, history, useMemo(() => Object.values(zooms), [zooms]));
  const [tab, setTab] = useState<Tab>("logs");
  // the spec says why a panel is empty or constant (kl_coef is 0, async is off)
  const spec = useConfig(run.data?.config).data?.spec;

  // the run's row carries what its stream said (liveCache.ts); the stream's store holds
  // the live points, logs and samples
  const liveRun = live.runs.get(runId);
  const state = run.data?.state;
  const desired = run.data?.desired_state ?? "running";

  const series = useMemo(() => {
    const out = new Map<string, Series>();
    const keys = new Set([...(zoomed?.keys() ?? []), ...(liveRun?.series.keys() ?? [])]);
    for (const key of keys) {
      out.set(key, mergeHistory(zoomed?.get(key) ?? emptySeries(), liveRun?.series.get(key) ?? emptySeries()));
    }
    return out;
  // eslint-disable-next-line react-hooks/exhaustive-deps -- live.version marks new points
  }, [zoomed, live.version, liveRun]);

  // a drag-zoom re-reads that window of the panel's keys at full resolution (x_min/x_max on
  // the server) and splices it into the history, so zooming shows every step, not the
  // coarse overview stretched; zooming out keeps what was read
  const zoomTo = useCallback((panel: string, keys: string[], range: [number, number] | null) => {
    const reference = series.get(keys.find((k) => series.get(k)?.step.length) ?? "");
    if (!range || !reference) return;
    const window = timeWindow(reference, view.axis, range[0], range[1], series.get(TOKENS_KEY));
    if (!window) return;
    setZoom((z) => ({ runId, byPanel: { ...(z.runId === runId ? z.byPanel : {}),
      [panel]: { keys, from: window[0], to: window[1] } } }));
  }, [series, view.axis, runId]);

  // the curated panels, then one per other key that has a series (stored or streamed)
  const groups = useMemo(() => runPanelGroups(series.keys()).map((g) => ({
    title: g.title,
    charts: g.panels.map((p) => ({
      ...panelChart(p, series, view, `run-${runId}`, spec),
      onZoom: (range: [number, number] | null) => zoomTo(p.title, p.keys, range),
    })),
  })), [series, view, runId, zoomTo, spec]);

  // the snapshot brings the last lines, the stream the new ones, events?before= older ones
  const streamedLogs = useMemo<LogLine[]>(() => [...(liveRun?.logs ?? [])],
  // eslint-disable-next-line react-hooks/exhaustive-deps -- live.version marks new lines
    [live.version, liveRun]);
  const { lines: logs, older: olderLogs } = useOlderLogs(runId, streamedLogs, !!liveRun?.olderLogs);

  // the snapshot's last sets and the stream's new ones, over the REST history (read when
  // the tab opens, older pages on demand)
  const sampleHistory = useSampleHistory(runId, tab === "samples");
  const sampleSteps = useMemo(() => mergeSampleSets(sampleHistory.sets, liveRun?.samples ?? [], Infinity),
  // eslint-disable-next-line react-hooks/exhaustive-deps -- live.version marks new samples
    [live.version, liveRun, sampleHistory.sets]);

  if (run.error && !run.data) return <ErrorBox error={run.error} onRetry={() => void run.refetch()} />;
  if (!run.data || !state) return <Loading what={`Loading run #${runId}`} />;
  const r = run.data;
  const latest = r.latest;

  return (
    <div className="run-page">
      <header className="run-head">
        <div className="run-title">
          <h1>Run #{r.id}</h1>
          <StateBadge state={state} desired={desired} />
          <BackendTag backend={r.backend} />
          <span className="muted">seed {r.seed}</span>
          <span className={`live-dot ${live.status === "live" ? "on" : ""}`} title={`stream: ${live.status}`} />
          <span className="muted small">{live.status === "live" ? "live" : live.status}</span>
        </div>
        <div className="run-meta">
          <Link to={`/?experiment=${r.experiment}`}>{r.experiment_name ?? `experiment ${r.experiment}`}</Link>
          <Link to={`/experiments/${r.experiment}/compare`}>compare backends</Link>
          {can("member") && <Link to={`/launch?clone=${r.id}`}>clone</Link>}
          {r.pool && <Link to={`/pools/${r.pool.id}`} data-testid="run-pool">{runPoolLine(r.pool)}</Link>}
        </div>
        <Progress step={r.step} total={r.total_steps} startedAt={r.started_at} state={state}
          secondsLeft={etaFromSeries(series.get("reward/mean"), r.total_steps)} />
        <div className="headline">
          {[["reward", "reward/mean"], ["accuracy", "accuracy"], ["kl", "kl"], ["tmpe", "token_mult_prob_error"],
            ["tok/s", "throughput/tokens_per_s"]].map(([label, key]) => (
            <div key={key} className="stat"><span>{label}</span><strong data-testid={`latest-${key}`}>{formatNumber(latest[key], 4)}</strong></div>
          ))}
        </div>
        <RunControls runId={r.id} state={state} desired={desired} send={(a) => live.send(a)} streamError={live.error} />
        {liveRun?.detail && <div className="muted small">{liveRun.detail}</div>}
        {r.error && <div className="state-error">{r.error}</div>}
        {state === "queued" && r.queued_reason && <div className="muted">queued: {r.queued_reason}</div>}
      </header>

      <PreflightPanel experimentId={r.experiment} />
      {r.purpose === "train" && <RunAlarms runId={r.id} />}
      <ChartToolbar view={view} onChange={setView} />
      {historyError && <ErrorBox error={historyError} />}
      {!history && <Loading what="Loading metrics" />}
      {groups.map((g) => (
        <section key={g.title} className="chart-group" data-testid={`chart-group-${g.title || "curated"}`}>
          {g.title && <h2 className="chart-group-title">{g.title}</h2>}
          <div className="chart-grid">
            {g.charts.map((c) => <Chart key={c.title} {...c} />)}
          </div>
        </section>
      ))}

      <section className="run-tabs">
        <div className="tabs" role="tablist">
          {(["logs", "checkpoints", "samples", "config"] as Tab[]).map((t) => (
            <button key={t} role="tab" aria-selected={tab === t} className={tab === t ? "active" : ""}
              onClick={() => setTab(t)}>{t}</button>
          ))}
        </div>
        {tab === "logs" && <LogTail lines={logs} older={olderLogs} />}
        {tab === "checkpoints" && <Checkpoints runId={r.id} />}
        {tab === "samples" && (
          <>
            {sampleHistory.error && <ErrorBox error={sampleHistory.error} />}
            {sampleHistory.loading && !sampleSteps.length ? <Loading what="Loading samples" />
              : <SampleInspector steps={sampleSteps} older={sampleHistory.more ? {
                loading: sampleHistory.loading, load: sampleHistory.loadOlder } : undefined} />}
          </>
        )}
        {tab === "config" && <ConfigView configId={r.config} />}
      </section>
    </div>
  );
}
