import { describe, expect, it } from "vitest";
import { alignSeries, ema, minMaxDownsample, positiveOnly, robustRange, seedBand, thin, timeWindow, xValues } from "./transforms";

describe("ema", () => {
  it("is the identity at weight 0", () => {
    expect(ema([1, 2, 3], 0)).toEqual([1, 2, 3]);
  });

  it("is debiased: a constant stays constant from the first point", () => {
    for (const v of ema([5, 5, 5, 5], 0.9)) expect(v).toBeCloseTo(5, 12);
  });

  it("matches the worked values", () => {
    // w = 0.5: last = 0.5·0 + 0.5·0 = 0 → 0/(1−.5) = 0; then 0.5·0+0.5·4 = 2 → 2/(1−.25) = 8/3
    const [a, b] = ema([0, 4], 0.5);
    expect(a).toBe(0);
    expect(b).toBeCloseTo(8 / 3, 12);
  });

  it("keeps gaps as gaps without resetting", () => {
    const out = ema([1, null, Number.NaN, 1], 0.6);
    expect(out[1]).toBeNull();
    expect(out[2]).toBeNull();
    expect(out[3]).toBeCloseTo(1, 12);
  });
});

describe("xValues", () => {
  const reward = { step: [0, 5, 10], value: [0.1, 0.2, 0.3], time: [1000, 1005.5, 1011] };
  const tokens = { step: [0, 10], value: [0, 640], time: [1000, 1011] };
  it("gives steps, wall time, or tokens read at the same step", () => {
    expect(xValues(reward, "step")).toEqual([0, 5, 10]);
    expect(xValues(reward, "time")).toEqual([1000, 1005.5, 1011]);
    expect(xValues(reward, "tokens", tokens)).toEqual([0, 320, 640]);
  });
  it("has no token x without the tokens series", () => {
    expect(xValues(reward, "tokens")).toEqual([null, null, null]);
  });
});

describe("alignSeries", () => {
  it("joins series on the union of x with gaps", () => {
    const aligned = alignSeries([
      { x: [1, 2, 3], y: [10, 20, 30] },
      { x: [2, 4, null], y: [200, 400, 999] },
    ]);
    expect(aligned).toEqual([[1, 2, 3, 4], [10, 20, 30, null], [null, 200, null, 400]]);
  });
});

describe("minMaxDownsample", () => {
  it("keeps a one-point spike that fixed-stride sampling would drop", () => {
    const n = 10_000;
    const x = Array.from({ length: n }, (_, i) => i);
    const y = x.map(() => 0.5);
    y[4321] = 9;
    const out = minMaxDownsample(x, y, 100);
    expect(out.x.length).toBeLessThanOrEqual(200);
    expect(Math.max(...(out.y as number[]))).toBe(9);
    expect(out.x).toContain(4321);
    // x stays sorted
    expect(out.x.every((v, i) => i === 0 || v > out.x[i - 1])).toBe(true);
  });
  it("returns short series unchanged", () => {
    expect(minMaxDownsample([1, 2], [3, 4], 10)).toEqual({ x: [1, 2], y: [3, 4] });
  });
});

describe("positiveOnly", () => {
  it("turns values a log scale cannot draw into gaps", () => {
    expect(positiveOnly([1, 0, -2, null, 3])).toEqual([1, null, null, null, 3]);
  });
});

describe("seedBand", () => {
  it("gives the mean and the min–max band over the seeds present", () => {
    const { mean, lo, hi } = seedBand([[1, 2, null], [3, null, null], [5, 4, null]]);
    expect(mean).toEqual([3, 3, null]);
    expect(lo).toEqual([1, 2, null]);
    expect(hi).toEqual([5, 4, null]);
  });
});

describe("thin", () => {
  it("leaves short lines alone and bounds long ones, dropping points without x", () => {
    expect(thin([1, null, 3], [1, 2, 3])).toEqual({ x: [1, null, 3], y: [1, 2, 3] });
    const x = Array.from({ length: 100_000 }, (_, i) => i);
    const out = thin(x, x.map((v) => Math.sin(v)), 4000);
    expect(out.x.length).toBeLessThanOrEqual(4000);
    expect(out.x.length).toBeGreaterThan(3000);
  });
});

describe("robustRange", () => {
  it("leaves spikes out, even the smoothed echo of one", () => {
    const raw = Array.from({ length: 60 }, (_, i) => 0.3 + i / 100);
    raw.push(25);
    const [lo, hi] = robustRange([raw, ema(raw, 0.6)])!;
    expect(hi).toBeLessThan(1);
    expect(lo).toBeGreaterThan(0.2);
  });
  it("keeps the whole range of a real trend", () => {
    const y = Array.from({ length: 100 }, (_, i) => i);
    expect(robustRange([y])).toEqual([-4.95, 103.95]);
  });
  it("pads a flat line and gives null without values", () => {
    expect(robustRange([[2, 2, 2]])).toEqual([1.9, 2.1]);
    expect(robustRange([[null]])).toBeNull();
  });
});

describe("timeWindow", () => {
  // steps 0..9 at one a second from t=1000, 100 tokens a step
  const s = { step: [...Array(10).keys()], value: Array(10).fill(1), time: [...Array(10).keys()].map((i) => 1000 + i) };
  const tokens = { step: s.step, value: s.step.map((i) => 100 * i), time: s.time };

  it("maps a zoom on any axis to the wall times around it, one point beyond each end", () => {
    expect(timeWindow(s, "step", 3, 5.5)).toEqual([1002, 1006]);
    expect(timeWindow(s, "time", 1003.5, 1004.5)).toEqual([1003, 1005]);
    expect(timeWindow(s, "tokens", 250, 420, tokens)).toEqual([1002, 1005]);
    expect(timeWindow(s, "step", 0, 1)).toEqual([1000, 1002]); // no point before the first
  });

  it("is null when no point is inside", () => {
    expect(timeWindow(s, "step", 3.2, 3.8)).toBeNull();
    expect(timeWindow(s, "tokens", 0, 1e9)).toBeNull(); // no tokens series: no x at all
  });
});
