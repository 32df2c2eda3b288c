import { describe, expect, it } from "vitest";
import type { InfiniteData } from "@tanstack/react-query";
import { invalidateFor, keepRunRows, writeRunRows } from "./liveCache";
import { applyMessage, type RunLive } from "./liveStore";
import { newQueryClient } from "./queryClient";
import { queryKeys } from "./queryKeys";
import type { RunPage } from "./runs";
import type { Run, RunDetail } from "./types";

const row = (id: number, more: Partial<Run> = {}) =>
  ({ id, state: "queued", desired_state: "running", step: 0, total_steps: 40, latest: {}, ...more }) as Run;
const cursor = { dispatch: 1, seq: 1 };

/** A stream that has reported run 1 running at step 7 with reward 0.5. */
function streamed(): Map<number, RunLive> {
  const runs = new Map<number, RunLive>();
  applyMessage(runs, { type: "state", run_id: 1, cursor, state: "running", desired_state: "running", step: 3, total_steps: 40,
    detail: "" });
  applyMessage(runs, { type: "metrics", run_id: 1, cursor, steps: [{ step: 7, time: 1, values: { "reward/mean": 0.5 } }] });
  return runs;
}

describe("writeRunRows", () => {
  it("lays the stream's word over the run's own answer and every list holding it", () => {
    const client = newQueryClient();
    const list = queryKeys.runs.list({ experiment: 4, limit: 100 });
    const pages = queryKeys.runs.list({ team: 1, limit: 100 });
    client.setQueryData(queryKeys.runs.detail(1), row(1) as RunDetail);
    client.setQueryData<RunPage>(list, { results: [row(1), row(2)], next: null });
    client.setQueryData<InfiniteData<RunPage>>(pages, { pages: [{ results: [row(2)] }, { results: [row(1)] }], pageParams: [null, "n"] });
    const other = client.getQueryData<RunPage>(list)!.results[1];

    writeRunRows(client, streamed(), [1]);
    const expected = { state: "running", step: 7, latest: { "reward/mean": 0.5 } };
    expect(client.getQueryData(queryKeys.runs.detail(1))).toMatchObject(expected);
    expect(client.getQueryData<RunPage>(list)!.results[0]).toMatchObject(expected);
    expect(client.getQueryData<RunPage>(list)!.results[1]).toBe(other); // untouched rows are the same objects
    const infinite = client.getQueryData<InfiniteData<RunPage>>(pages)!;
    expect(infinite.pages[1].results[0]).toMatchObject(expected);
    expect(infinite.pageParams).toEqual([null, "n"]);
  });

  it("writes nothing where no answer is cached yet", () => {
    const client = newQueryClient();
    writeRunRows(client, streamed(), [1]);
    expect(client.getQueryData(queryKeys.runs.detail(1))).toBeUndefined();
  });
});

describe("keepRunRows", () => {
  it("overlays an answer that lands after the stream spoke, and only answers from the server", async () => {
    const client = newQueryClient();
    const stop = keepRunRows(client, streamed());
    // the REST read was answered from an older row (the stream's snapshot is newer)
    await client.fetchQuery({ queryKey: queryKeys.runs.detail(1), queryFn: () => row(1, { step: 2 }) });
    expect(client.getQueryData(queryKeys.runs.detail(1))).toMatchObject({ state: "running", step: 7 });
    await client.fetchQuery({ queryKey: queryKeys.runs.list({ limit: 100 }), queryFn: () => ({ results: [row(1), row(3)] }) });
    expect(client.getQueryData<RunPage>(queryKeys.runs.list({ limit: 100 }))!.results[0].state).toBe("running");
    // a run the stream never reported is left as the server said
    await client.fetchQuery({ queryKey: queryKeys.runs.detail(3), queryFn: () => row(3) });
    expect(client.getQueryData<Run>(queryKeys.runs.detail(3))!.state).toBe("queued");
    stop();
    await client.fetchQuery({ queryKey: queryKeys.runs.detail(1), queryFn: () => row(1), staleTime: 0 });
    expect(client.getQueryData<Run>(queryKeys.runs.detail(1))!.state).toBe("queued"); // stream closed
  });
});

describe("invalidateFor", () => {
  it("makes the checkpoint list stale when one is written or the state moves", () => {
    const client = newQueryClient();
    for (const id of [1, 2]) client.setQueryData(queryKeys.runs.checkpoints(id), []);
    invalidateFor(client, { type: "checkpoint", run_id: 1, cursor, step: 30, uri: "file:///a/30", adapter_version: 30 });
    expect(client.getQueryState(queryKeys.runs.checkpoints(1))!.isInvalidated).toBe(true);
    expect(client.getQueryState(queryKeys.runs.checkpoints(2))!.isInvalidated).toBe(false);
    invalidateFor(client, { type: "log", run_id: 2, cursor, id: 5, time: 1, level: "info", message: "x", kind: "log" });
    expect(client.getQueryState(queryKeys.runs.checkpoints(2))!.isInvalidated).toBe(false);
    invalidateFor(client, { type: "state", run_id: 2, cursor, state: "paused", desired_state: "paused", step: 3,
      total_steps: 40, detail: "" });
    expect(client.getQueryState(queryKeys.runs.checkpoints(2))!.isInvalidated).toBe(true);
  });
});
