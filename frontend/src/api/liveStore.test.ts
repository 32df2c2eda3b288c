import { describe, expect, it } from "vitest";
import { afterParam, applyMessage, type RunLive } from "./liveStore";

describe("applyMessage", () => {
  it("builds a run's view from a snapshot, then live metrics, state and logs", () => {
    const runs = new Map<number, RunLive>();
    applyMessage(runs, {
      type: "snapshot", run_id: 7, cursor: { dispatch: 1, seq: 42 },
      run: { state: "running", desired_state: "running", step: 2, total_steps: 200 },
      latest: { "reward/mean": 0.15 },
      points: { "reward/mean": [[1, 0.12, 100], [2, 0.15, 101]] },
      logs: [{ time: 99, level: "info", message: "started", kind: "status" }],
    });
    applyMessage(runs, {
      type: "metrics", run_id: 7, cursor: { dispatch: 1, seq: 43 },
      steps: [{ step: 3, time: 102, values: { "reward/mean": 0.2, kl: 0.01 } }],
    });
    applyMessage(runs, {
      type: "state", run_id: 7, cursor: { dispatch: 1, seq: 44 }, state: "paused",
      desired_state: "paused", detail: "checkpoint at step 3",
    });
    applyMessage(runs, { type: "log", run_id: 7, cursor: { dispatch: 1, seq: 44 }, time: 103, level: "info", message: "paused" });
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
    applyMessage(runs, { type: "log", run_id: 7, cursor: { dispatch: 1, seq: 45 }, time: 104, level: "info",
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
    expect(applyMessage(runs, { type: "error", code: "forbidden", message: "no" })).toBeNull();
    expect(runs.size).toBe(0);
  });
});
