import { describe, expect, it } from "vitest";
import { emptySeries, etaFromSeries, mergeHistory, mergePoints, spliceWindow, valueAtStep, type Series } from "./series";

describe("mergePoints", () => {
  it("appends live points in order", () => {
    const s = mergePoints(emptySeries(), [[1, 0.1, 100], [2, 0.2, 101]]);
    mergePoints(s, [[3, 0.3, 102]]);
    expect(s).toEqual({ step: [1, 2, 3], value: [0.1, 0.2, 0.3], time: [100, 101, 102] });
  });

  it("inserts out-of-order points and lets a re-emitted step replace the old value", () => {
    const s = mergePoints(emptySeries(), [[1, 0.1, 100], [4, 0.4, 104]]);
    mergePoints(s, [[2, 0.2, 102], [4, 0.45, 110], [0, 0.0, 99]]);
    expect(s.step).toEqual([0, 1, 2, 4]);
    expect(s.value).toEqual([0.0, 0.1, 0.2, 0.45]);
    expect(s.time).toEqual([99, 100, 102, 110]);
  });
});

describe("mergeHistory", () => {
  it("keeps downsampled history and overlays the exact live points", () => {
    // history: every 10th step up to 40 (downsampled); live: 35..42 arrived meanwhile
    const history = { step: [0, 10, 20, 30, 40], value: [0, 1, 2, 3, 4], time: [0, 10, 20, 30, 40] };
    const live = { step: [35, 40, 41, 42], value: [3.5, 4.1, 4.2, 4.3], time: [35, 40, 41, 42] };
    const merged = mergeHistory(history, live);
    expect(merged.step).toEqual([0, 10, 20, 30, 35, 40, 41, 42]);
    expect(merged.value).toEqual([0, 1, 2, 3, 3.5, 4.1, 4.2, 4.3]);
    expect(history.step).toHaveLength(5); // inputs untouched
  });
});

describe("valueAtStep", () => {
  const tokens = { step: [0, 10, 20], value: [0, 1000, 3000], time: [0, 1, 2] };
  it("interpolates between steps and is exact on them", () => {
    expect(valueAtStep(tokens, 10)).toBe(1000);
    expect(valueAtStep(tokens, 15)).toBe(2000);
  });
  it("is null outside the series", () => {
    expect(valueAtStep(tokens, 21)).toBeNull();
    expect(valueAtStep(tokens, -1)).toBeNull();
  });
});

describe("etaFromSeries", () => {
  it("uses the recent pace, not the whole history", () => {
    // 10 s/step for steps 0..10 (say a slow warm-up), then 1 s/step up to step 40
    const step = [...Array.from({ length: 11 }, (_, i) => i), ...Array.from({ length: 30 }, (_, i) => 11 + i)];
    const time = step.map((s) => (s <= 10 ? 10 * s : 100 + (s - 10)));
    const value = step.map(() => 0);
    expect(etaFromSeries({ step, value, time }, 100, 20)).toBe(60);
  });
  it("is null without two points", () => {
    expect(etaFromSeries({ step: [1], value: [0], time: [0] }, 10)).toBeNull();
    expect(etaFromSeries(undefined, 10)).toBeNull();
  });
});

describe("spliceWindow", () => {
  const series = (steps: number[]): Series => ({ step: steps, value: steps.map((s) => s * 10), time: steps.map((s) => 1000 + s) });

  it("replaces the coarse points inside the window's steps and keeps the rest", () => {
    const coarse = series([0, 100, 200, 300, 400]);
    const fine = { step: [150, 151, 200, 249, 250], value: [1, 2, 3, 4, 5], time: [1, 2, 3, 4, 5] };
    const out = spliceWindow(coarse, fine);
    expect(out.step).toEqual([0, 100, 150, 151, 200, 249, 250, 300, 400]);
    expect(out.value).toEqual([0, 1000, 1, 2, 3, 4, 5, 3000, 4000]); // step 200 from the window
    expect(coarse.step).toEqual([0, 100, 200, 300, 400]); // input kept
  });

  it("handles windows at the ends, an empty history and an empty window", () => {
    expect(spliceWindow(series([0, 10, 20]), series([18, 19, 20, 21])).step).toEqual([0, 10, 18, 19, 20, 21]);
    expect(spliceWindow(series([5, 10]), series([0, 1])).step).toEqual([0, 1, 5, 10]);
    expect(spliceWindow(series([]), series([3])).step).toEqual([3]);
    const h = series([1, 2]);
    expect(spliceWindow(h, series([]))).toBe(h);
  });
});
