import { describe, expect, it } from "vitest";
import { eta, formatDuration, formatNumber, formatTicks } from "./format";

describe("formatTicks", () => {
  it("shows as many decimals as the tick spacing needs", () => {
    expect(formatTicks([1.002, 1.004, 1.006], 0.002)).toEqual(["1.002", "1.004", "1.006"]);
    expect(formatTicks([0, 0.5, 1], 0.5)).toEqual(["0.0", "0.5", "1.0"]);
    expect(formatTicks([0, 20, 40], 20)).toEqual(["0", "20", "40"]);
  });
  it("leaves hidden ticks empty", () => {
    expect(formatTicks([0.1, null, 10], 0.1)).toEqual(["0.1", "", "10.0"]);
    expect(formatTicks([0.001, 0.01, null], Number.NaN)).toEqual(["0.001", "0.01", ""]);
  });
  it("shortens large magnitudes", () => {
    expect(formatTicks([0, 500_000, 1_000_000], 500_000)).toEqual(["0", "0.5M", "1.0M"]);
    expect(formatTicks([0, 250_000, 500_000], 250_000)).toEqual(["0", "250k", "500k"]);
  });
});

describe("formatters", () => {
  it("formats durations, numbers and the ETA", () => {
    expect(formatDuration(42)).toBe("42s");
    expect(formatDuration(3 * 3600 + 120)).toBe("3h 2m");
    expect(formatNumber(1.00172, 4)).toBe("1.002");
    expect(formatNumber(null)).toBe("—");
    // 10 of 40 steps took 100 s: 300 s to go
    expect(eta("2026-01-01T00:00:00Z", 10, 40, Date.parse("2026-01-01T00:01:40Z"))).toBe(300);
    expect(eta(null, 10, 40)).toBeNull();
  });
});
