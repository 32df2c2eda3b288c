import { describe, expect, it } from "vitest";
import { backendMean, comparePanel, type RunSeries } from "./compareData";

const run = (runId: number, backend: "torch" | "vllm", seed: number, values: number[], t0: number): RunSeries => ({
  runId, backend, seed,
  series: new Map([["reward/mean", { step: values.map((_, i) => i), value: values, time: values.map((_, i) => t0 + 10 * i) }]]),
});

describe("backendMean", () => {
  it("averages seeds per step and takes the band from their min and max", () => {
    const m = backendMean([run(1, "torch", 0, [0, 1, 2], 1000), run(2, "torch", 1, [2, 3], 5000)], "reward/mean",
      { axis: "step", smoothing: 0, logY: false });
    expect(m.steps).toEqual([0, 1, 2]);
    expect(m.mean).toEqual([1, 2, 2]);
    expect(m.lo).toEqual([0, 1, 2]);
    expect(m.hi).toEqual([2, 3, 2]);
  });

  it("counts time from each run's start, so runs started apart overlay", () => {
    const m = backendMean([run(1, "torch", 0, [0, 1], 1000), run(2, "torch", 1, [2, 3], 5000)], "reward/mean",
      { axis: "time", smoothing: 0, logY: false });
    expect(m.x).toEqual([0, 10]);
  });
});

describe("comparePanel", () => {
  it("draws faint seeds, a band and a mean per backend, and one line for a single seed", () => {
    const panel = comparePanel("Reward", "reward/mean", [
      run(1, "torch", 0, [0, 1], 0), run(2, "torch", 1, [2, 3], 0), run(3, "vllm", 0, [1, 1], 0),
    ], { axis: "step", smoothing: 0, logY: false });
    expect(panel.series.map((s) => s.label)).toEqual([
      "torch seed 0", "torch seed 1", "torch max", "torch min", "torch (mean of 2)", "vllm",
    ]);
    expect(panel.bands).toEqual([{ upper: 3, lower: 4, color: expect.any(String) }]);
    expect(panel.data[0]).toEqual([0, 1]);
    expect(panel.data[5]).toEqual([1, 2]);
  });
});
