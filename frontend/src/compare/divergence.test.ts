import { describe, expect, it } from "vitest";
import { divergence, verdict } from "./divergence";

const steps = Array.from({ length: 200 }, (_, i) => i);
// deterministic "noise" in [−0.01, 0.01]
const noise = (i: number) => 0.01 * Math.sin(i * 12.9898);

describe("divergence", () => {
  it("finds agreement when the curves differ only by noise", () => {
    const a = steps.map((i) => 0.3 + 0.002 * i + noise(i));
    const b = steps.map((i) => 0.3 + 0.002 * i + noise(i + 77));
    const d = divergence(steps, a, b);
    expect(d.divergesFrom).toBeNull();
    expect(d.agreeWithin!).toBeLessThan(0.02);
    expect(verdict("torch", "vllm", d)).toMatch(/^torch and vllm agree within ±0\.0\d+ reward$/);
  });

  it("finds the step where one backend starts to fall behind", () => {
    const a = steps.map((i) => 0.3 + 0.002 * i + noise(i));
    const b = steps.map((i) => 0.3 + 0.002 * i + noise(i + 77) - (i >= 120 ? 0.2 : 0));
    const d = divergence(steps, a, b, { window: 10 });
    // the 10-step window's mean passes the tolerance within a few steps of the drop
    expect(d.divergesFrom).toBeGreaterThanOrEqual(120);
    expect(d.divergesFrom).toBeLessThan(125);
    expect(verdict("torch", "vllm", d)).toBe(`torch and vllm diverge from step ${d.divergesFrom}`);
  });

  it("computes the per-step difference and a band around its windowed mean", () => {
    const d = divergence([0, 1, 2, 3], [1, 1, 1, null], [0.5, 0.7, 0.6, 0.6], { window: 3 });
    expect(d.diff).toEqual([0.5, 0.30000000000000004, 0.4, null]);
    // window of 3: mean 0.4, sd 0.1, half-width 1.96·0.1/√3
    expect(d.mean[2]).toBeCloseTo(0.4, 12);
    expect(d.hi[2]! - d.mean[2]!).toBeCloseTo((1.96 * 0.1) / Math.sqrt(3), 12);
    expect(d.mean[3]).toBeNull();
  });

  it("says when there is not enough data", () => {
    expect(verdict("a", "b", divergence([0], [1], [1]))).toBe("a and b: not enough common steps yet");
  });
});
