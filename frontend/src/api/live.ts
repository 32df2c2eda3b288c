// The websocket of docs/live-protocol.md as a hook: no polling, reconnects with its cursors
// so nothing is missed, and re-renders at most once per animation frame however fast
// metrics arrive. What it says of a run's row (state, step, latest values) goes into the
// query cache (liveCache.ts); its series, logs and samples stay in its store (liveStore.ts).
import { useQueryClient } from "@tanstack/react-query";
import { useCallback, useEffect, useRef, useState } from "react";
import { invalidateFor, keepRunRows, writeAlarms, writeRunRows } from "./liveCache";
import { afterParam, applyMessage, type RunLive } from "./liveStore";
import type { ControlMessage, LiveMessage, RunAction } from "./types";

export type LiveStatus = "connecting" | "live" | "reconnecting" | "forbidden" | "closed";

export interface LiveStream {
  runs: Map<number, RunLive>;
  /** bumps on every applied batch: a cheap dependency for memos */
  version: number;
  status: LiveStatus;
  error: { code: string; message: string } | null;
  /** false while the socket is not open */
  send: (action: RunAction, runId?: number) => boolean;
}

function socketUrl(path: string, after: string | null): string {
  const proto = window.location.protocol === "https:" ? "wss:" : "ws:";
  const query = after ? `?after=${encodeURIComponent(after)}` : "";
  return `${proto}//${window.location.host}${path}${query}`;
}

function useLiveStreams(paths: readonly string[], single: boolean): LiveStream {
  const client = useQueryClient();
  const runsRef = useRef(new Map<number, RunLive>());
  const socketsRef = useRef(new Map<string, WebSocket>());
  const ownerRef = useRef(new Map<number, string>()); // run id → the socket path reporting it
  const [version, setVersion] = useState(0);
  const [status, setStatus] = useState<LiveStatus>("connecting");
  const [error, setError] = useState<{ code: string; message: string } | null>(null);
  const key = paths.join("|");

  useEffect(() => {
    const sockets = socketsRef.current; // one map for the hook's life, cleared on cleanup
    runsRef.current = new Map();
    setVersion((v) => v + 1);
    const list = key ? key.split("|") : [];
    if (!list.length) { setStatus("closed"); return; }
    let closedByUs = false;
    let frame: number | undefined;
    const timers = new Set<number>();
    const open = new Set<string>();
    const touched = new Set<number>(); // runs reported since the last frame
    const stopKeeping = keepRunRows(client, runsRef.current);
    const schedule = () => {
      if (frame === undefined) {
        frame = requestAnimationFrame(() => {
          frame = undefined;
          writeRunRows(client, runsRef.current, touched);
          touched.clear();
          setVersion((v) => v + 1);
        });
      }
    };

    const connect = (path: string, retry: number, seen: Set<number>) => {
      setStatus(retry ? "reconnecting" : "connecting");
      // reconnect from the cursors of the runs this socket has reported, so nothing is lost
      const mine = new Map([...runsRef.current].filter(([id]) => seen.has(id)));
      const ws = new WebSocket(socketUrl(path, afterParam(mine, single)));
      sockets.set(path, ws);
      ws.onopen = () => {
        retry = 0;
        open.add(path);
        if (open.size === list.length) setStatus("live");
      };
      ws.onmessage = (event) => {
        const msg = JSON.parse(event.data as string) as LiveMessage;
        if (msg.type === "error") setError({ code: msg.code, message: msg.message });
        const runId = applyMessage(runsRef.current, msg);
        invalidateFor(client, msg);
        writeAlarms(client, msg);
        if (runId !== null) { seen.add(runId); touched.add(runId); ownerRef.current.set(runId, path); schedule(); }
      };
      ws.onclose = (event) => {
        open.delete(path);
        sockets.delete(path);
        if (closedByUs) return;
        if (event.code === 4403 || event.code === 4401 || event.code === 4404) {
          setStatus("forbidden");
          setError({ code: "forbidden", message: "you may not watch this stream" });
          return;
        }
        setStatus("reconnecting");
        const timer = window.setTimeout(() => { timers.delete(timer); connect(path, retry + 1, seen); },
          Math.min(10_000, 500 * 2 ** Math.min(retry + 1, 5)));
        timers.add(timer);
      };
    };
    list.forEach((path) => connect(path, 0, new Set()));
    return () => {
      closedByUs = true;
      stopKeeping();
      timers.forEach((t) => clearTimeout(t));
      if (frame !== undefined) cancelAnimationFrame(frame);
      sockets.forEach((ws) => ws.close());
      sockets.clear();
      setStatus("closed");
    };
  }, [key, single, client]);

  const send = useCallback((action: RunAction, runId?: number) => {
    const path = runId !== undefined && !single ? ownerRef.current.get(runId)
      : [...socketsRef.current.keys()][0];
    const ws = path ? socketsRef.current.get(path) : undefined;
    if (!ws || ws.readyState !== WebSocket.OPEN) return false;
    setError(null);
    // a run stream takes {action}; an experiment stream needs the run too
    const control: ControlMessage = single || runId === undefined ? { action } : { action, run_id: runId };
    ws.send(JSON.stringify(control));
    return true;
  }, [single]);

  return { runs: runsRef.current, version, status, error, send };
}

export function useRunStream(runId: number | null): LiveStream {
  return useLiveStreams(runId ? [`/ws/runs/${runId}/`] : [], true);
}

/** One socket per experiment; messages of all of them land in one map keyed by run. */
export function useExperimentStreams(experimentIds: readonly number[]): LiveStream {
  const paths = [...new Set(experimentIds)].sort((a, b) => a - b).map((id) => `/ws/experiments/${id}/`);
  return useLiveStreams(paths, false);
}
