import { describe, expect, it } from "vitest";
import { seriesFromBody } from "./metrics";
import type { RunMetricsBody } from "./types";

describe("seriesFromBody", () => {
  it("keeps every key, drops null values, and orders points by step", () => {
    // asked with x=time: a min/max bucket may hold a later step before an earlier one
    const body: RunMetricsBody = {
      run: 7, x: "time",
      series: [
        { key: "reward/mean", x: [10, 12, 11], y: [0.1, 0.3, null], step: [1, 3, 2], count: 3, downsampled: false },
        { key: "kl", x: [], y: [], step: [], count: 0, downsampled: false },
      ],
    };
    const out = seriesFromBody(body);
    expect([...out.keys()]).toEqual(["reward/mean", "kl"]);
    expect(out.get("reward/mean")).toEqual({ step: [1, 3], value: [0.1, 0.3], time: [10, 12] });
    expect(out.get("kl")).toEqual({ step: [], value: [], time: [] });
  });
});
