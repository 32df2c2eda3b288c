// What the run page reads from the REST API beside its stream: older log lines
// (events?before=) and the sample sets the snapshot no longer holds (/samples).
import { useCallback, useEffect, useMemo, useState } from "react";
import { ApiError } from "../api/client";
import { oldestLogId, prependOlderLogs, type LogLine, type SampleStep } from "../api/liveStore";
import { fetchOlderEvents, fetchSampleSets } from "../api/runs";
import type { RunEventRow } from "../api/types";
import type { OlderLines } from "./LogTail";

function asApiError(err: unknown): ApiError {
  return err instanceof ApiError ? err : new ApiError(0, "client", String(err));
}

/** The stream's lines with the older pages the user asked for in front of them. */
export function useOlderLogs(runId: number, streamed: LogLine[], mayHaveOlder: boolean): {
  lines: LogLine[]; older: OlderLines;
} {
  const [rows, setRows] = useState<RunEventRow[]>([]);
  const [more, setMore] = useState(true);
  const [loading, setLoading] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  useEffect(() => { setRows([]); setMore(true); setError(null); }, [runId]);
  const lines = useMemo(() => prependOlderLogs(streamed, rows), [streamed, rows]);
  const before = oldestLogId(lines);
  const load = useCallback(() => {
    if (before === null) return;
    setLoading(true); setError(null);
    fetchOlderEvents(runId, before).then((page) => {
      setRows((r) => [...r, ...page.results]);
      setMore(page.next_before !== null);
    }, (err) => setError(asApiError(err))).finally(() => setLoading(false));
  }, [runId, before]);
  return { lines, older: { more: mayHaveOlder && more && before !== null, loading, error, load } };
}

/** Sample sets from the REST API, newest page first on `enabled`, older pages on demand. */
export function useSampleHistory(runId: number, enabled: boolean) {
  const [sets, setSets] = useState<SampleStep[]>([]);
  const [next, setNext] = useState<number | null | undefined>(undefined); // undefined: not read yet
  const [loading, setLoading] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  useEffect(() => { setSets([]); setNext(undefined); setError(null); }, [runId]);
  const load = useCallback((beforeStep?: number) => {
    setLoading(true); setError(null);
    fetchSampleSets(runId, beforeStep).then((page) => {
      setSets((s) => [...s, ...page.results.map((r) => ({ step: r.step, items: r.items }))]);
      setNext(page.next_before_step);
    }, (err) => setError(asApiError(err))).finally(() => setLoading(false));
  }, [runId]);
  useEffect(() => { if (enabled && next === undefined && !loading && !error) load(); },
    [enabled, next, loading, error, load]);
  return {
    sets, loading, error,
    more: typeof next === "number",
    loadOlder: () => { if (typeof next === "number") load(next); },
  };
}
