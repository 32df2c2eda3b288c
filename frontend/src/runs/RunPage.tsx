// One run, live: its state and controls, the metric charts fed by the websocket on top of
// the downsampled history (a panel for every stored key, the curated ones first, the rest
// grouped by prefix), the log tail, checkpoints, samples and config.
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { Link, useParams } from "react-router";
import { useRunStream } from "../api/live";
import { useConfig } from "../api/experiments";
import { fetchRunWindow, useRunMetrics } from "../api/metrics";
import { useRun } from "../api/runs";
import { invalidate } from "../api/useQuery";
import { mergeSampleSets, type LogLine } from "../api/liveStore";
import { Chart } from "../charts/LazyChart";
import { panelChart, runPanelGroups, TOKENS_KEY } from "../charts/panels";
import { emptySeries, etaFromSeries, mergeHistory, spliceWindow, type Series } from "../charts/series";
import { timeWindow } from "../charts/transforms";
import { formatNumber } from "../lib/format";
import { runPoolLine } from "../lib/pools";
import { useSession } from "../session/SessionContext";
import { ErrorBox, Loading } from "../ui/States";
import { Checkpoints } from "./Checkpoints";
import { ConfigView } from "./ConfigView";
import { LogTail } from "./LogTail";
import { Progress } from "./Progress";
import { RunControls } from "./RunControls";
import { useOlderLogs, useSampleHistory } from "./runHistory";
import { SampleInspector } from "./SampleInspector";
import { BackendTag, StateBadge } from "./StateBadge";
import { ChartToolbar, useChartView } from "./ChartToolbar";

type Tab = "logs" | "checkpoints" | "samples" | "config";

const NO_WINDOWS = new Map<string, Series>();

export default function RunPage() {
  const runId = Number(useParams().runId);
  const { can } = useSession();
  const run = useRun(runId);
  const live = useRunStream(runId);
  const [view, setView] = useChartView();
  const { history, error: historyError } = useRunMetrics(runId);
  // the zoomed windows read at full resolution, one per key, drawn over the history
  const [zoom, setZoom] = useState<{ runId: number; windows: Map<string, Series> }>(
    { runId, windows: new Map() });
  const windows = zoom.runId === runId ? zoom.windows : NO_WINDOWS;
  const [tab, setTab] = useState<Tab>("logs");
  // the spec says why a panel is empty or constant (kl_coef is 0, async is off)
  const spec = useConfig(run.data?.config).data?.spec;

  const liveRun = live.runs.get(runId);
  const state = liveRun?.run?.state ?? run.data?.state;
  const desired = liveRun?.run?.desired_state ?? run.data?.desired_state ?? "running";
  const step = Math.max(liveRun?.run?.step ?? 0, run.data?.step ?? 0);
  const total = liveRun?.run?.total_steps || run.data?.total_steps || 0;

  // refetch the checkpoint list when the stream reports one (or the state moves), not on a timer
  const checkpointCue = `${state}:${liveRun?.checkpoints ?? 0}`;
  useEffect(() => { invalidate(`/api/v1/runs/${runId}/checkpoints`); }, [checkpointCue, runId]);

  const series = useMemo(() => {
    const out = new Map<string, Series>();
    const keys = new Set([...(history?.keys() ?? []), ...(liveRun?.series.keys() ?? [])]);
    for (const key of keys) {
      const past = history?.get(key) ?? emptySeries();
      const fine = windows.get(key);
      out.set(key, mergeHistory(fine ? spliceWindow(past, fine) : past, liveRun?.series.get(key) ?? emptySeries()));
    }
    return out;
  // eslint-disable-next-line react-hooks/exhaustive-deps -- live.version marks new points
  }, [history, windows, live.version, liveRun]);

  // a drag-zoom re-reads that window of the panel's keys at full resolution (x_min/x_max on
  // the server) and splices it into the history, so zooming shows every step, not the
  // coarse overview stretched
  const zoomRequest = useRef<AbortController | null>(null);
  const zoomTo = useCallback((keys: string[], range: [number, number] | null) => {
    zoomRequest.current?.abort();
    const reference = series.get(keys.find((k) => series.get(k)?.step.length) ?? "");
    if (!range || !reference) return;
    const window = timeWindow(reference, view.axis, range[0], range[1], series.get(TOKENS_KEY));
    if (!window) return;
    const controller = new AbortController();
    zoomRequest.current = controller;
    fetchRunWindow(runId, keys, window[0], window[1], 1000, controller.signal).then((fine) => {
      setZoom((z) => ({ runId, windows: new Map([...(z.runId === runId ? z.windows : []), ...fine]) }));
    }, () => { /* the coarse line stays: a zoom refinement is an extra */ });
  }, [series, view.axis, runId]);

  // the curated panels, then one per other key that has a series (stored or streamed)
  const groups = useMemo(() => runPanelGroups(series.keys()).map((g) => ({
    title: g.title,
    charts: g.panels.map((p) => ({
      ...panelChart(p, series, view, `run-${runId}`, spec),
      onZoom: (range: [number, number] | null) => zoomTo(p.keys, range),
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

  if (run.error && !run.data) return <ErrorBox error={run.error} onRetry={run.reload} />;
  if (!run.data || !state) return <Loading what={`Loading run #${runId}`} />;
  const r = run.data;
  const latest = { ...r.latest, ...liveRun?.latest };

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
        <Progress step={step} total={total} startedAt={r.started_at} state={state}
          secondsLeft={etaFromSeries(series.get("reward/mean"), total)} />
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
