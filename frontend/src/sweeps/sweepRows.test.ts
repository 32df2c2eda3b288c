import { describe, expect, it } from "vitest";
import { emptyRunLive, type RunLive } from "../api/liveStore";
import type { SweepDetail, SweepMember } from "../api/types";
import { metricChoices, plotRows, staleAgainst, withLiveRuns } from "./sweepRows";

function member(index: number, run: number | null, best: number | null, settings = { "lora.r": 8 * (index + 1) }): SweepMember {
  return {
    index, settings, state: run ? "active" : "pending", reason: "", stopped_step: null, config: 1, best, last: best,
    is_best: false,
    run: run === null ? null : { id: run, state: "running", desired_state: "running", step: 3, total_steps: 10,
      queued_reason: "", latest: { "reward/mean": best ?? 0, "eval/accuracy": 0.5 } },
  };
}

function sweep(members: SweepMember[], mode: "max" | "min" = "max"): SweepDetail {
  return { id: 1, team: 1, experiment: 7, name: "s", method: "grid", params: { "lora.r": { values: [8, 16, 24] } },
    seed: 0, metric: "reward/mean", mode, stopping: null, budget: { members: 3, gpu_hours: null }, parallel: 2,
    cluster: null, state: "running", end_reason: "", gpu_hours: 0,
    counts: { pending: 1, active: 2, stopping: 0, stopped: 0, done: 0, skipped: 0 }, created_by: null,
    created_at: "", finished_at: null, members };
}

function live(state: string, step: number, latest: Record<string, number>): RunLive {
  return { ...emptyRunLive(), run: { state: state as never, desired_state: "running", step, total_steps: 10 }, latest };
}

describe("withLiveRuns", () => {
  it("overlays the stream and marks the best member over both", () => {
    const s = sweep([member(0, 11, 0.5), member(1, 12, 0.4), member(2, null, null)]);
    const runs = new Map([[12, live("running", 6, { "reward/mean": 0.9 })]]);
    const rows = withLiveRuns(s, runs);
    expect(rows.map((r) => r.isBest)).toEqual([false, true, false]);
    expect(rows[1]).toMatchObject({ best: 0.9, last: 0.9, run: { step: 6, state: "running" } });
    expect(rows[1].run?.latest).toEqual({ "reward/mean": 0.9, "eval/accuracy": 0.5 });
    // a worse live value keeps the stored best
    const worse = withLiveRuns(s, new Map([[11, live("running", 4, { "reward/mean": 0.1 })]]));
    expect(worse[0]).toMatchObject({ best: 0.5, last: 0.1, isBest: true });
  });

  it("minimises when the sweep does", () => {
    const rows = withLiveRuns(sweep([member(0, 11, 0.5), member(1, 12, 0.4)], "min"), new Map());
    expect(rows.map((r) => r.isBest)).toEqual([false, true]);
  });
});

describe("the plot's rows", () => {
  it("offers the objective then the other reported metrics, and reads the one chosen", () => {
    const s = sweep([member(0, 11, 0.5), member(1, null, null)]);
    const rows = withLiveRuns(s, new Map());
    expect(metricChoices(s, rows).map((c) => c.value)).toEqual(["best", "last", "latest:eval/accuracy"]);
    expect(plotRows(s, rows, "best")).toEqual([
      { index: 0, values: { "lora.r": 8, "reward/mean (best)": 0.5 } },
      { index: 1, values: { "lora.r": 16, "reward/mean (best)": undefined } },
    ]);
    expect(plotRows(s, rows, "latest:eval/accuracy")[0].values["eval/accuracy"]).toBe(0.5);
  });
});

describe("staleAgainst", () => {
  it("is true when the stream knows a run or a state the answer does not", () => {
    const s = sweep([member(0, 11, 0.5)]);
    expect(staleAgainst(s, new Map([[11, live("running", 4, {})]]))).toBe(false);
    expect(staleAgainst(s, new Map([[11, live("pausing", 4, {})]]))).toBe(true);
    expect(staleAgainst(s, new Map([[13, live("dispatching", 0, {})]]))).toBe(true);
    expect(staleAgainst(s, new Map([[13, emptyRunLive()]]))).toBe(false);
  });
});
