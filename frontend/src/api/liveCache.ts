// What a stream says about a run's row (state, step, latest values) written into the cached
// REST answers that hold the row, the run's own and every run list, so a page reads one
// run, not a REST row with a stream beside it. An answer that arrives after the stream
// spoke is overlaid again: the stream's word is the newer one.
import type { InfiniteData, QueryClient } from "@tanstack/react-query";
import type { RunLive } from "./liveStore";
import { queryKeys } from "./queryKeys";
import type { RunPage } from "./runs";
import type { ComparedAlarms, LiveMessage, Run, RunAlarms } from "./types";

/** A run as the stream last described it, over its REST row. */
export function withLive<R extends Run>(run: R, live: RunLive | undefined): R {
  if (!live?.run) return run;
  return {
    ...run, state: live.run.state, desired_state: live.run.desired_state,
    step: Math.max(run.step, live.run.step), total_steps: live.run.total_steps || run.total_steps,
    latest: { ...run.latest, ...live.latest },
  };
}

type ListData = RunPage | InfiniteData<RunPage>;

function overlayPage(page: RunPage, runs: Map<number, RunLive>): RunPage {
  if (!page.results.some((r) => runs.get(r.id)?.run)) return page;
  return { ...page, results: page.results.map((r) => withLive(r, runs.get(r.id))) };
}

function overlayList(data: ListData | undefined, runs: Map<number, RunLive>): ListData | undefined {
  if (!data) return data;
  if ("pages" in data) {
    const pages = data.pages.map((p) => overlayPage(p, runs));
    return pages.every((p, i) => p === data.pages[i]) ? data : { ...data, pages };
  }
  return overlayPage(data, runs);
}

/** Writes the rows of `ids` (runs the stream just reported) into every cached answer. */
export function writeRunRows(client: QueryClient, runs: Map<number, RunLive>, ids: Iterable<number>): void {
  const touched = new Map<number, RunLive>();
  for (const id of ids) {
    const live = runs.get(id);
    if (!live?.run) continue;
    touched.set(id, live);
    client.setQueryData<Run>(queryKeys.runs.detail(id), (row) => row && withLive(row, live));
  }
  if (touched.size) client.setQueriesData<ListData>({ queryKey: queryKeys.runs.lists }, (d) => overlayList(d, touched));
}

/** Keeps the stream's rows over REST answers that land later (a list read again after a
 * launch, a run page opened while its stream was already speaking). Returns the unsubscribe. */
export function keepRunRows(client: QueryClient, runs: Map<number, RunLive>): () => void {
  return client.getQueryCache().subscribe((event) => {
    // a write of ours (setQueryData) is "manual": only answers from the server are overlaid
    if (event.type !== "updated" || event.action.type !== "success" || event.action.manual) return;
    const [root, kind, id] = event.query.queryKey;
    if (root !== "runs") return;
    if (kind === "detail" && runs.get(id as number)?.run) {
      writeRunRows(client, runs, [id as number]);
    } else if (kind === "list") {
      client.setQueryData<ListData>(event.query.queryKey, (d) => overlayList(d, runs));
    }
  });
}

/** What a message makes stale: the checkpoint list when one is written (a pause writes
 * one; the state change may be all a viewer hears of it), and the pre-flight checks. */
export function invalidateFor(client: QueryClient, msg: LiveMessage): void {
  if ((msg.type === "checkpoint" || msg.type === "state") && msg.run_id !== undefined) {
    void client.invalidateQueries({ queryKey: queryKeys.runs.checkpoints(msg.run_id) });
  }
  // a pre-flight run that ended has reported its verdict; a held run may have been released
  if (msg.type === "state") void client.invalidateQueries({ queryKey: queryKeys.preflights });
}

/** An `alarms` message is the run's alarms, all of them: written into the run's answer and
 * into every compared answer holding the run. A snapshot (a connect, or a reconnect that
 * could not replay) reads them again: a change may have been missed meanwhile. */
export function writeAlarms(client: QueryClient, msg: LiveMessage): void {
  if (msg.type === "snapshot") {
    void client.invalidateQueries({ queryKey: queryKeys.alarms.run(msg.run_id) });
    void client.invalidateQueries({ queryKey: queryKeys.alarms.compares });
    return;
  }
  if (msg.type !== "alarms") return;
  const body: RunAlarms = { run_id: msg.run_id, alarms: msg.alarms };
  client.setQueryData<RunAlarms>(queryKeys.alarms.run(msg.run_id), body);
  client.setQueriesData<ComparedAlarms>({ queryKey: queryKeys.alarms.compares }, (d) =>
    d && d.runs.some((r) => r.run_id === msg.run_id)
      ? { runs: d.runs.map((r) => (r.run_id === msg.run_id ? body : r)) } : d);
}
