import { describe, expect, it } from "vitest";
import { extent, flatYRange, loneXRange, showMarkers, yAxisWidth } from "./ranges";
import { formatTicks } from "../lib/format";

describe("flatYRange", () => {
  it("pads a series flat but for float noise around its value", () => {
    // the demo's token_mult_prob_error: every value ≈ 1.0000001
    const [lo, hi] = flatYRange(1.0000001, 1.0000003)!;
    expect(lo).toBeCloseTo(0.95, 6);
    expect(hi).toBeCloseTo(1.05, 6);
    expect(lo < 1.0000001 && hi > 1.0000003).toBe(true);
  });
  it("pads an exactly flat series and a single value, zero included", () => {
    expect(flatYRange(2, 2)).toEqual([1.9, 2.1]);
    expect(flatYRange(-4, -4)).toEqual([-4.2, -3.8]);
    expect(flatYRange(0, 0)).toEqual([-1, 1]);
  });
  it("leaves a varying series to uPlot", () => {
    expect(flatYRange(0.1, 0.2)).toBeNull();
    expect(flatYRange(1, 1.001)).toBeNull();
    expect(flatYRange(null, null)).toBeNull();
  });
  it("gives a log scale a factor each side, nothing for values it cannot draw", () => {
    expect(flatYRange(1e-3, 1e-3, true)).toEqual([5e-4, 2e-3]);
    expect(flatYRange(0, 0, true)).toBeNull();
  });
});

describe("loneXRange", () => {
  it("puts a single x in the middle of a window of its axis's unit", () => {
    expect(loneXRange(7, 7, "step")).toEqual([6, 8]);
    expect(loneXRange(1_700_000_000, 1_700_000_000, "time")).toEqual([1_699_999_940, 1_700_000_060]);
    expect(loneXRange(2000, 2000, "tokens")).toEqual([1900, 2100]);
  });
  it("leaves a spread of x alone", () => {
    expect(loneXRange(1, 5, "step")).toBeNull();
    expect(loneXRange(null, null, "step")).toBeNull();
  });
});

describe("extent and markers", () => {
  it("finds the finite extent of several lines", () => {
    expect(extent([[3, null, 1], [NaN, 7]])).toEqual([1, 7]);
    expect(extent([[null], []])).toEqual([null, null]);
  });
  it("shows markers on sparse values and always on a lone one", () => {
    const lone = [null, null, 0.4, null, null, null];
    expect(showMarkers(lone, 0, 5, 10)).toBe(true);
    const dense = Array.from({ length: 100 }, (_, i) => i);
    expect(showMarkers(dense, 0, 99, 600)).toBe(false);
    expect(showMarkers(dense, 0, 9, 600)).toBe(true); // zoomed in: 10 points in view
  });
});

describe("readable ticks of a narrow range", () => {
  it("tells neighbouring fine ticks apart around 1 and near 0", () => {
    expect(formatTicks([1.00001, 1.00002, 1.00003], 1e-5)).toEqual(["1.00001", "1.00002", "1.00003"]);
    const small = formatTicks([1e-5, 1.5e-5, 2e-5], 5e-6);
    expect(new Set(small).size).toBe(3);
  });
});

describe("yAxisWidth", () => {
  it("keeps the usual width for short labels and widens for long ones", () => {
    expect(yAxisWidth(["0.2", "0.4"])).toBe(56);
    expect(yAxisWidth(null)).toBe(56);
    expect(yAxisWidth(["1.20e-7", "1.00e-7", "8.00e-8"])).toBeGreaterThan(56);
    expect(yAxisWidth(["1.0000012"])).toBeGreaterThan(yAxisWidth(["1.20e-7"]));
  });
});
