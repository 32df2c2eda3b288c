import { describe, expect, it } from "vitest";
import { afterParam, applyMessage, mergeSampleSets, oldestLogId, prependOlderLogs, type RunLive } from "./liveStore";
import type { LiveRun } from "./types";

describe("applyMessage", () => {
  it("builds a run's view from a snapshot, then live metrics, state and logs", () => {
    const runs = new Map<number, RunLive>();
    applyMessage(runs, {
      type: "snapshot", run_id: 7, cursor: { dispatch: 1, seq: 42 },
      run: runFields({ step: 2, total_steps: 200 }),
      latest: { "reward/mean": 0.15 },
      points: { "reward/mean": [[1, 0.12, 100], [2, 0.15, 101]] },
      logs: [{ id: 30, time: 99, level: "info", message: "started", kind: "status" }],
      samples: [],
    });
    applyMessage(runs, {
      type: "metrics", run_id: 7, cursor: { dispatch: 1, seq: 43 },
      steps: [{ step: 3, time: 102, values: { "reward/mean": 0.2, kl: 0.01 } }],
    });
    applyMessage(runs, {
      type: "state", run_id: 7, cursor: { dispatch: 1, seq: 44 }, state: "paused",
      desired_state: "paused", step: 3, total_steps: 200, detail: "checkpoint at step 3",
    });
    applyMessage(runs, { type: "log", run_id: 7, cursor: { dispatch: 1, seq: 44 }, id: 31, time: 103, level: "info",
      message: "paused", kind: "log" });
    const live = runs.get(7)!;
    expect(live.series.get("reward/mean")!.value).toEqual([0.12, 0.15, 0.2]);
    expect(live.series.get("kl")!.step).toEqual([3]);
    expect(live.latest["reward/mean"]).toBe(0.2);
    expect(live.run).toEqual({ state: "paused", desired_state: "paused", step: 3, total_steps: 200 });
    expect(live.detail).toBe("checkpoint at step 3");
    expect(live.logs.map((l) => [l.level, l.message])).toEqual([
      ["state", "started"], ["state", "running → paused"], ["info", "paused"],
    ]);
    // the stored status row, when it comes, takes the provisional line's place
    applyMessage(runs, { type: "log", run_id: 7, cursor: { dispatch: 1, seq: 45 }, id: 32, time: 104, level: "info",
      message: "running → paused: checkpoint", kind: "status" });
    expect(live.logs.map((l) => l.message)).toEqual(["started", "paused", "running → paused: checkpoint"]);
    expect(afterParam(runs, true)).toBe("1:45");
  });

  it("keys an experiment stream's messages by run and builds its after cursor", () => {
    const runs = new Map<number, RunLive>();
    applyMessage(runs, { type: "metrics", run_id: 7, cursor: { dispatch: 1, seq: 43 }, steps: [] });
    applyMessage(runs, { type: "metrics", run_id: 8, cursor: { dispatch: 2, seq: 5 }, steps: [] });
    expect(afterParam(runs, false)).toBe("7:1:43,8:2:5");
  });

  it("ignores error messages", () => {
    const runs = new Map<number, RunLive>();
    expect(applyMessage(runs, { type: "error", code: "forbidden", message: "no", field: null })).toBeNull();
    expect(runs.size).toBe(0);
  });

  it("takes the snapshot's sample sets and log ids, and live sets replace a step's", () => {
    const runs = new Map<number, RunLive>();
    const item = (prompt: string) => ({ prompt, completion: "4", reward: 1, advantage: 0.5 });
    applyMessage(runs, {
      type: "snapshot", run_id: 7, cursor: { dispatch: 1, seq: 9 },
      run: runFields({ step: 4, total_steps: 10 }), latest: {}, points: {},
      logs: [{ id: 31, time: 99, level: "info", message: "a", kind: "log" }],
      samples: [{ step: 3, items: [item("p3")] }, { step: 4, items: [item("p4")] }],
    });
    applyMessage(runs, { type: "samples", run_id: 7, cursor: { dispatch: 1, seq: 10 }, step: 4, items: [item("p4 again")] });
    const live = runs.get(7)!;
    expect(live.samples.map((s) => [s.step, s.items[0].prompt])).toEqual([[3, "p3"], [4, "p4 again"]]);
    expect(live.logs[0].id).toBe(31);
    expect(live.olderLogs).toBe(false); // 1 line: the snapshot holds all there is
    applyMessage(runs, { ...snapshotOf(7), logs: Array.from({ length: 100 }, (_, i) =>
      ({ id: 100 + i, time: 1, level: "info" as const, message: `l${i}`, kind: "log" as const })) });
    expect(runs.get(7)!.olderLogs).toBe(true); // a full snapshot: older lines may be stored
  });
});

function runFields(progress: { step: number; total_steps: number }): LiveRun {
  return { state: "running", desired_state: "running", ...progress, backend: "torch", seed: 0, error: "",
    queued_reason: "" };
}

function snapshotOf(runId: number) {
  return { type: "snapshot" as const, run_id: runId, cursor: { dispatch: 1, seq: 1 },
    run: runFields({ step: 0, total_steps: 1 }), latest: {}, points: {}, logs: [], samples: [] };
}

describe("mergeSampleSets", () => {
  it("orders by step, lets the newer set of a step win and keeps the newest `limit`", () => {
    const set = (step: number, prompt: string) => ({ step, items: [{ prompt, completion: "", reward: 0, advantage: 0 }] });
    const merged = mergeSampleSets([set(5, "old 5"), set(9, "9")], [set(7, "7"), set(5, "new 5"), set(1, "1")], 3);
    expect(merged.map((s) => [s.step, s.items[0].prompt])).toEqual([[5, "new 5"], [7, "7"], [9, "9"]]);
  });
});

describe("older log lines", () => {
  it("puts a page fetched with before= (newest first) ahead of the held lines, once each", () => {
    const held = [{ id: 40, time: 50, level: "info", message: "c" }, { time: 51, level: "state", message: "x → y" }];
    expect(oldestLogId(held)).toBe(40);
    const lines = prependOlderLogs(held, [
      { id: 40, dispatch: 1, kind: "log", level: "info", message: "c", time: "1970-01-01T00:00:50Z" },
      { id: 39, dispatch: 1, kind: "status", level: "info", message: "queued → running", time: "1970-01-01T00:00:49Z" },
      { id: 38, dispatch: 1, kind: "log", level: "warning", message: "a", time: "1970-01-01T00:00:48.500Z" },
    ]);
    expect(lines.map((l) => [l.id, l.level, l.message, l.time])).toEqual([
      [38, "warning", "a", 48.5], [39, "state", "queued → running", 49], [40, "info", "c", 50],
      [undefined, "state", "x → y", 51],
    ]);
    expect(oldestLogId(lines)).toBe(38);
    expect(oldestLogId([{ time: 1, level: "state", message: "provisional" }])).toBeNull();
  });
});
