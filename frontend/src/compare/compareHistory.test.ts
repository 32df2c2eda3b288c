import { describe, expect, it } from "vitest";
import type { Series } from "../charts/series";
import { FIRST_KEY, historyPlan, mergeStage, spliceStepWindows, type History } from "./compareHistory";

const s = (...steps: number[]): Series => ({ step: steps, value: steps.map((x) => x / 10), time: steps.map((x) => 100 + x) });

describe("mergeStage", () => {
  it("replaces the keys a later stage read and keeps the others", () => {
    const stride: History = new Map([[1, new Map([["reward/mean", s(0, 50, 99)], ["kl", s(0, 99)]])]]);
    const full: History = new Map([
      [1, new Map([["reward/mean", s(0, 10, 50, 51, 99)]])],
      [2, new Map([["reward/mean", s(0, 1)]])],
    ]);
    const merged = mergeStage(stride, full);
    expect(merged.get(1)!.get("reward/mean")!.step).toEqual([0, 10, 50, 51, 99]);
    expect(merged.get(1)!.get("kl")!.step).toEqual([0, 99]); // not in the later stage: kept
    expect(merged.get(2)!.get("reward/mean")!.step).toEqual([0, 1]);
    // the inputs are left as they were (React state)
    expect(stride.get(1)!.get("reward/mean")!.step).toEqual([0, 50, 99]);
    expect(stride.has(2)).toBe(false);
  });

  it("starts from nothing", () => {
    const merged = mergeStage(null, new Map([[3, new Map([["kl", s(1)]])]]));
    expect([...merged.keys()]).toEqual([3]);
  });
});

describe("historyPlan", () => {
  it("reads the first key by stride alone, then the rest by stride, then all by min/max", () => {
    expect(historyPlan([FIRST_KEY, "kl", "tokens/total"])).toEqual([
      { keys: [FIRST_KEY], maxPoints: 500, sample: "stride" },
      { keys: ["kl", "tokens/total"], maxPoints: 500, sample: "stride" },
      { keys: [FIRST_KEY, "kl", "tokens/total"], maxPoints: 1000, sample: "minmax" },
    ]);
    expect(historyPlan([FIRST_KEY])).toEqual([
      { keys: [FIRST_KEY], maxPoints: 500, sample: "stride" },
      { keys: [FIRST_KEY], maxPoints: 1000, sample: "minmax" },
    ]);
  });
});

describe("spliceStepWindows", () => {
  it("puts a zoomed window in place of the overview's points, with times interpolated", () => {
    const overview: History = new Map([[1, new Map([["kl", s(0, 100, 200)]])]]); // time = 100 + step
    const window: History = new Map([[1, new Map([["kl", { step: [40, 41, 100, 150], value: [9, 8, 7, 6], time: [NaN, NaN, NaN, NaN] }]])]]);
    const out = spliceStepWindows(overview, window).get(1)!.get("kl")!;
    expect(out.step).toEqual([0, 40, 41, 100, 150, 200]);
    expect(out.value).toEqual([0, 9, 8, 7, 6, 20]);
    expect(out.time).toEqual([100, 140, 141, 200, 250, 300]);
    expect(overview.get(1)!.get("kl")!.step).toEqual([0, 100, 200]); // input kept
  });

  it("leaves the time unknown (NaN) outside the overview's range", () => {
    const out = spliceStepWindows(new Map([[1, new Map([["kl", s(10, 20)]])]]),
      new Map([[1, new Map([["kl", { step: [25], value: [1], time: [NaN] }]])]])).get(1)!.get("kl")!;
    expect(out.step).toEqual([10, 20, 25]);
    expect(Number.isNaN(out.time[2])).toBe(true);
  });
});
