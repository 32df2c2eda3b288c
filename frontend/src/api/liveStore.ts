// What the websocket has told us, per run: state, progress, metric series, logs, samples and
// the cursor to reconnect from. Pure (no socket, no React) so it is tested directly.
import { emptySeries, mergePoints, type Point, type Series } from "../charts/series";
import type { Cursor, LiveMessage, LiveRun, LogRow, RunEventRow, Sample } from "./types";

/** What the view keeps of a run's state: what `state` messages carry as well as snapshots. */
export type RunProgress = Pick<LiveRun, "state" | "desired_state" | "step" | "total_steps">;

export interface LogLine {
  /** the stored event's id (absent on a line written here from a `state` message) */
  id?: number;
  time: number; level: string; message: string;
  /** written here from a `state` message; replaced by the stored status row if one arrives */
  provisional?: boolean;
}

export interface RunLive {
  run: RunProgress | null;
  detail: string;
  latest: Record<string, number>;
  series: Map<string, Series>;
  logs: LogLine[];
  /** the snapshot held as many lines as it carries at most: older ones may be stored */
  olderLogs: boolean;
  samples: { step: number; items: Sample[] }[];
  cursor: Cursor | null;
}

const MAX_LOGS = 1000;
/** SNAPSHOT_LOGS of platform/paddock/live/snapshots.py: a snapshot's lines at most */
const SNAPSHOT_LOGS = 100;
const MAX_SAMPLE_STEPS = 50;

export function emptyRunLive(): RunLive {
  return { run: null, detail: "", latest: {}, series: new Map(), logs: [], olderLogs: false, samples: [],
    cursor: null };
}

function series(live: RunLive, key: string): Series {
  let s = live.series.get(key);
  if (!s) { s = emptySeries(); live.series.set(key, s); }
  return s;
}

function pushLogs(live: RunLive, rows: readonly LogRow[]): void {
  for (const row of rows) {
    // a state change is stored as a status event and may arrive as a log row of that kind
    if (row.kind === "status") {
      const i = live.logs.findIndex((l) => l.provisional && row.message.startsWith(l.message));
      if (i >= 0) live.logs.splice(i, 1);
    }
    live.logs.push({ id: row.id, time: row.time, level: row.kind === "status" ? "state" : row.level, message: row.message });
  }
  if (live.logs.length > MAX_LOGS) live.logs.splice(0, live.logs.length - MAX_LOGS);
}

/** Applies one server message in place. Returns the run it touched (null: none). */
export function applyMessage(runs: Map<number, RunLive>, msg: LiveMessage): number | null {
  if (msg.type === "error") return null;
  let live = runs.get(msg.run_id);
  if (!live) { live = emptyRunLive(); runs.set(msg.run_id, live); }
  live.cursor = msg.cursor;
  switch (msg.type) {
    case "snapshot": {
      const { state, desired_state, step, total_steps } = msg.run;
      live.run = { state, desired_state, step, total_steps };
      live.latest = { ...msg.latest };
      for (const [key, rows] of Object.entries(msg.points)) mergePoints(series(live, key), rows);
      live.logs = [];
      pushLogs(live, msg.logs);
      live.olderLogs = msg.logs.length >= SNAPSHOT_LOGS;
      live.samples = mergeSampleSets(live.samples, msg.samples);
      break;
    }
    case "metrics": {
      const byKey = new Map<string, Point[]>();
      let maxStep = -1;
      for (const { step, time, values } of msg.steps) {
        if (step > maxStep) maxStep = step;
        for (const [key, value] of Object.entries(values)) {
          let rows = byKey.get(key);
          if (!rows) { rows = []; byKey.set(key, rows); }
          rows.push([step, value, time]);
          live.latest[key] = value;
        }
      }
      byKey.forEach((rows, key) => mergePoints(series(live!, key), rows));
      if (live.run && maxStep >= 0 && maxStep > live.run.step) live.run = { ...live.run, step: maxStep };
      break;
    }
    case "state": {
      // a control's transitions reach viewers as state messages only: note them in the tail
      const previous = live.run?.state;
      if (previous && previous !== msg.state) {
        live.logs.push({ time: Date.now() / 1000, level: "state", message: `${previous} → ${msg.state}`, provisional: true });
      }
      live.run = { state: msg.state, desired_state: msg.desired_state, step: msg.step, total_steps: msg.total_steps };
      live.detail = msg.detail;
      break;
    }
    case "log": {
      pushLogs(live, [msg]);
      break;
    }
    case "checkpoint": {
      break; // the list is read again (liveCache.ts invalidateFor): only the cursor moves
    }
    case "alarms": {
      break; // written into the alarms' answers (liveCache.ts writeAlarms): only the cursor moves
    }
    case "samples": {
      live.samples = mergeSampleSets(live.samples, [{ step: msg.step, items: msg.items }]);
      break;
    }
  }
  return msg.run_id;
}

export interface SampleStep { step: number; items: Sample[] }

/** Sample sets by step, oldest first: a step in `newer` replaces the same step in `older`
 * (a step reported again after a resume); at most `limit`, the newest kept. */
export function mergeSampleSets(older: readonly SampleStep[], newer: readonly SampleStep[],
  limit = MAX_SAMPLE_STEPS): SampleStep[] {
  const byStep = new Map(older.map((s) => [s.step, s]));
  for (const s of newer) byStep.set(s.step, { step: s.step, items: s.items });
  return [...byStep.values()].sort((a, b) => a.step - b.step).slice(-limit);
}

/** Older lines fetched with `events?before=` (newest first, ISO times) put before `lines`;
 * a line already held (same id) is not repeated. */
export function prependOlderLogs(lines: readonly LogLine[], older: readonly RunEventRow[]): LogLine[] {
  const held = new Set(lines.map((l) => l.id).filter((id) => id !== undefined));
  const before = [...older].reverse().filter((e) => !held.has(e.id)).map((e): LogLine => ({
    id: e.id, time: Date.parse(e.time) / 1000, level: e.kind === "status" ? "state" : e.level, message: e.message,
  }));
  return [...before, ...lines];
}

/** The id to pass as `before=` for the lines older than those held (null: none has an id). */
export function oldestLogId(lines: readonly LogLine[]): number | null {
  let oldest: number | null = null;
  for (const l of lines) if (l.id !== undefined && (oldest === null || l.id < oldest)) oldest = l.id;
  return oldest;
}

/** The `after` query of a reconnect: `d:s` on a run stream, `run:d:s,…` on an experiment. */
export function afterParam(runs: Map<number, RunLive>, single: boolean): string | null {
  const parts: string[] = [];
  runs.forEach((live, runId) => {
    if (!live.cursor) return;
    const c = `${live.cursor.dispatch}:${live.cursor.seq}`;
    parts.push(single ? c : `${runId}:${c}`);
  });
  if (!parts.length) return null;
  return single ? parts[0] : parts.join(",");
}
