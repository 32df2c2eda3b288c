// What the run page reads from the REST API beside its stream: older log lines
// (events?before=) and the sample sets the snapshot no longer holds (/samples).
import { useMemo } from "react";
import { oldestLogId, prependOlderLogs, type LogLine, type SampleStep } from "../api/liveStore";
import { useRunEvents, useRunSamples } from "../api/runs";
import type { OlderLines } from "./LogTail";

/** The stream's lines with the older pages the user asked for in front of them. */
export function useOlderLogs(runId: number, streamed: LogLine[], mayHaveOlder: boolean): {
  lines: LogLine[]; older: OlderLines;
} {
  const events = useRunEvents(runId, oldestLogId(streamed));
  const rows = useMemo(() => events.data?.pages.flatMap((p) => p.results) ?? [], [events.data]);
  const lines = useMemo(() => prependOlderLogs(streamed, rows), [streamed, rows]);
  const more = mayHaveOlder && oldestLogId(lines) !== null && (!events.data || events.hasNextPage);
  return { lines, older: { more, loading: events.isFetching, error: events.error,
    load: () => void events.fetchNextPage() } };
}

/** Sample sets from the REST API, newest page first once `enabled`, older pages on demand. */
export function useSampleHistory(runId: number, enabled: boolean) {
  const samples = useRunSamples(runId, enabled);
  const sets = useMemo<SampleStep[]>(() => samples.data?.pages.flatMap((p) => p.results)
    .map((r) => ({ step: r.step, items: r.items })) ?? [], [samples.data]);
  return {
    sets, loading: samples.isFetching, error: samples.error, more: samples.hasNextPage,
    loadOlder: () => void samples.fetchNextPage(),
  };
}
