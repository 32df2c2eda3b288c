import { describe, expect, it } from "vitest";
import { axisOf, goodness, parallelCoordinates, position, type Row } from "./parallel";

const rows: Row[] = [
  { index: 0, values: { "lora.r": 8, "train.lr": 1e-4, adv: "grpo", "reward/mean": 0.2 } },
  { index: 1, values: { "lora.r": 16, "train.lr": 1e-3, adv: "rloo", "reward/mean": 0.6 } },
  { index: 2, values: { "lora.r": 32, "train.lr": 1e-2, adv: "grpo", "reward/mean": 1.0 } },
  { index: 3, values: { "lora.r": 8, "train.lr": 1e-2, adv: "grpo" } }, // not reported yet
];

describe("axes", () => {
  it("is linear for numbers within a decade, log beyond, category otherwise", () => {
    const r = axisOf("lora.r", rows);
    expect(r.kind).toBe("linear");
    expect(r.domain).toEqual([8, 32]);
    expect(r.ticks).toEqual([{ at: 0, label: "8" }, { at: 1 / 3, label: "16" }, { at: 1, label: "32" }]);
    const lr = axisOf("train.lr", rows);
    expect(lr.kind).toBe("log");
    // 1e-4, 1e-3, 1e-2 are evenly spaced in log space
    lr.ticks.forEach((t, i) => expect(t.at).toBeCloseTo([0, 0.5, 1][i], 12));
    expect(lr.ticks.map((t) => t.label)).toEqual(["0.0001", "0.001", "0.01"]);
    const adv = axisOf("adv", rows);
    expect(adv).toMatchObject({ kind: "category", domain: ["grpo", "rloo"] });
    expect(adv.ticks).toEqual([{ at: 0, label: "grpo" }, { at: 1, label: "rloo" }]);
  });

  it("puts a single value or a flat axis in the middle, and a missing value nowhere", () => {
    const one = axisOf("x", [{ index: 0, values: { x: 3 } }, { index: 1, values: { x: 3 } }]);
    expect(position(one, 3)).toBe(0.5);
    expect(position(axisOf("s", [{ index: 0, values: { s: true } }]), true)).toBe(0.5);
    expect(position(one, undefined)).toBeNull();
    expect(position(axisOf("lora.r", rows), "8")).toBeNull(); // a string on a numeric axis
  });

  it("reads a mix of numbers and strings as categories", () => {
    const mixed = axisOf("k", [{ index: 0, values: { k: 1 } }, { index: 1, values: { k: "auto" } }, { index: 2, values: { k: null } }]);
    expect(mixed.kind).toBe("category");
    expect(mixed.domain).toEqual(["1", "auto", "null"]);
  });
});

describe("parallelCoordinates", () => {
  it("gives each member a line over the keys then the metric", () => {
    const { axes, lines } = parallelCoordinates(rows, ["lora.r", "train.lr", "reward/mean"]);
    expect(axes.map((a) => a.key)).toEqual(["lora.r", "train.lr", "reward/mean"]);
    expect(lines.map((l) => l.index)).toEqual([0, 1, 2, 3]);
    expect(lines[0].points).toEqual([0, 0, 0]);
    expect(lines[1].points[0]).toBeCloseTo(1 / 3);
    expect(lines[1].points[2]).toBeCloseTo(0.5);
    expect(lines[2].points.map((p) => p?.toFixed(9))).toEqual(["1.000000000", "1.000000000", "1.000000000"]);
    expect(lines[3].points.map((p) => p?.toFixed(9) ?? null)).toEqual(["0.000000000", "1.000000000", null]); // no metric yet
  });

  it("shades a line by its metric, the best end 1 whichever the mode", () => {
    expect(goodness(0.8, "max")).toBe(0.8);
    expect(goodness(0.8, "min")).toBeCloseTo(0.2);
    expect(goodness(null, "max")).toBeNull();
  });
});
