import { describe, expect, it } from "vitest";
import demo from "./fixtures/demo-reward.json";
import { ALARM_LIMITS } from "../api/names.gen";
import { divergence, divergenceRule, engineVerdict, judgeEngine, tQuantile975, verdict, type Column, type EngineColumns } from "./divergence";
import { learning, run } from "./synthetic";

const steps = Array.from({ length: 200 }, (_, i) => i);
const PAIRS = 100; // independent pairs of runs per case, each from its own seeds
const same = learning(0.2, 0.8, 60); // one config: both backends learn alike
const flat = () => 0.2;
const rising = learning(0.2, 0.8, 80, 40); // leaves 0.2 from about step 50

/** `seeds` runs of `curve` per backend, pair `p` (each run its own noise). */
function runs(curve: (s: number) => number, p: number, seeds: number, side: number): Column[] {
  return Array.from({ length: seeds }, (_, j) => run(steps, curve, 10_000 * p + 100 * side + j));
}

function calls(seeds: number, a: (s: number) => number, b: (s: number) => number,
  edit: (c: Column) => Column = (c) => c) {
  return Array.from({ length: PAIRS }, (_, p) =>
    divergence(steps, runs(a, p, seeds, 0), runs(b, p, seeds, 1).map(edit)));
}

const blip = (c: Column) => c.map((v, i) => (i >= 120 && i < 125 ? v! - 0.4 : v));

describe("divergence", () => {
  it("calls the quickstart demo's torch and vllm runs alike (the old per-window rule said step 28)", () => {
    const d = divergence(demo.steps, [demo.torch], [demo.vllm]);
    expect(d.divergesFrom).toBeNull();
    expect(d.episodes).toEqual([]);
    expect(verdict("torch", "vllm", d)).toMatch(/^torch and vllm agree within ±0\.\d+ reward$/);
  });

  it("never calls two noisy curves of one config divergent, with three seeds a side", () => {
    const found = calls(3, same, same);
    expect(found.filter((d) => d.divergesFrom !== null || d.episodes.length)).toHaveLength(0);
    expect(found.every((d) => d.method === "seeds")).toBe(true);
  });

  it("rarely does with one run a side, whose wander it cannot tell from a backend's", () => {
    const found = calls(1, same, same);
    expect(found.filter((d) => d.divergesFrom !== null).length).toBeLessThanOrEqual(2);
    expect(found.filter((d) => d.episodes.length).length).toBeLessThanOrEqual(10);
    expect(found.every((d) => d.method === "autocorrelation")).toBe(true);
  });

  it.each([1, 3])("finds a curve that rises beside a flat one, from about where it leaves (%i seeds)", (seeds) => {
    const found = calls(seeds, rising, flat);
    const from = found.map((d) => d.divergesFrom);
    expect(from.every((s) => s !== null)).toBe(true);
    const sorted = (from as number[]).sort((x, y) => x - y);
    const median = sorted[PAIRS / 2];
    expect(median).toBeGreaterThanOrEqual(50);
    expect(median).toBeLessThanOrEqual(80);
    if (seeds === 3) expect(sorted[0]).toBeGreaterThanOrEqual(30);
    expect(verdict("torch", "vllm", found[0])).toMatch(/^torch and vllm diverge from step \d+ \(reward difference \+0\.\d+ ± 0\.\d+\)$/);
  });

  it("does not call a five-step blip of one backend a divergence", () => {
    expect(calls(3, same, same, blip).filter((d) => d.divergesFrom !== null || d.episodes.length)).toHaveLength(0);
    expect(calls(1, same, same, blip).filter((d) => d.divergesFrom !== null || d.episodes.length).length).toBeLessThanOrEqual(5);
  });

  it("clears once the curves come together again, and keeps the episode", () => {
    const apart = (s: number) => 0.5 + (s >= 60 && s < 130 ? 0.3 : 0);
    const found = Array.from({ length: 20 }, (_, p) =>
      divergence(steps, runs(apart, p, 3, 0), runs(() => 0.5, p, 3, 1)));
    for (const d of found) {
      expect(d.divergesFrom).toBeNull();
      expect(d.episodes).toHaveLength(1);
      const [start, end] = d.episodes[0];
      expect(start).toBeGreaterThanOrEqual(55);
      expect(start).toBeLessThanOrEqual(75);
      expect(end).toBeGreaterThanOrEqual(125);
      expect(end).toBeLessThanOrEqual(150);
    }
    expect(verdict("torch", "vllm", found[0])).toMatch(/agree within ±0\.\d+ reward \(they differed at steps \d+–\d+\)$/);
  });

  it("puts a pooled two-sample t interval around the difference of the seeds' means", () => {
    // window 1: no smoothing; at step 0 A = {1, 0.8}, B = {0.5, 0.3}: D = 0.5, pooled sd 0.1414
    const d = divergence([0], [[1], [0.8]], [[0.5], [0.3]], { window: 1 });
    expect(d.diff[0]).toBeCloseTo(0.5, 12);
    expect(d.mean[0]).toBeCloseTo(0.5, 12);
    const sp = Math.sqrt((0.02 + 0.02) / 2);
    expect(d.hi[0]! - d.mean[0]!).toBeCloseTo(4.303 * sp * Math.sqrt(1 / 2 + 1 / 2), 10);
  });

  it("widens the one-run interval by the window's autocorrelation", () => {
    const s = Array.from({ length: 20 }, (_, i) => i);
    const wander = s.map((i) => 0.1 * Math.sin(i / 4)); // slow: strongly autocorrelated
    const zigzag = s.map((i) => (i % 2 ? 0.1 : -0.1)); // no positive autocorrelation
    const zero = s.map(() => 0);
    const half = (a: number[]) => { const d = divergence(s, [a], [zero]); return d.hi[19]! - d.mean[19]!; };
    const sd = (a: number[]) => { const m = a.reduce((x, y) => x + y) / a.length; return Math.sqrt(a.reduce((x, y) => x + (y - m) ** 2, 0) / (a.length - 1)); };
    expect(half(zigzag)).toBeCloseTo((tQuantile975(19) * sd(zigzag)) / Math.sqrt(20), 10);
    expect(half(wander) / sd(wander)).toBeGreaterThan(3 * (half(zigzag) / sd(zigzag)));
  });

  it("reads Student's t", () => {
    expect(tQuantile975(1)).toBe(12.706);
    expect(tQuantile975(4)).toBe(2.776);
    expect(tQuantile975(11)).toBe(2.228); // between entries: the wider one below
    expect(tQuantile975(1e9)).toBe(1.96);
  });

  it("says when there is not enough data, and what its rule is", () => {
    expect(verdict("a", "b", divergence([0], [[1]], [[1]]))).toBe("a and b: not enough common steps yet");
    expect(divergenceRule("seeds")).toMatch(/last 20 steps.*95 % interval.*excludes 0.*0\.02.*40 steps in a row.*seeds/);
    expect(divergenceRule("autocorrelation")).toMatch(/one run per backend/);
  });
});

describe("the engine verdict", () => {
  const limits = ALARM_LIMITS;
  const steps = Array.from({ length: 60 }, (_, i) => i + 1);
  const engine = (tmpe: (s: number, run: number) => number, genKl: (s: number) => number, runs = 2): EngineColumns => ({
    backend: "vllm", runs,
    tmpe: { steps, cols: Array.from({ length: runs }, (_, r) => steps.map((s) => tmpe(s, r))) },
    genKl: { steps, cols: Array.from({ length: runs }, () => steps.map(genKl)) },
  });

  it("matches when both figures stay near agreement", () => {
    const j = judgeEngine(engine((s, r) => 1.0001 + 1e-5 * ((s + r) % 3), () => 2e-6), limits);
    expect(j.verdict).toBe("matches");
    expect(j.tmpe?.n).toBe(120);
    expect(engineVerdict(j, limits)).toMatch(/^vllm matches its trainer \(token_mult_prob_error median 1\.000/);
  });

  it("drifts from the step its smoothed median crosses the limit, and says which figure", () => {
    // 1 + 0.004·(s − 30) > 1.05 from s = 43; the median of the 10 steps to s (the mean of
    // its 5th and 6th) exceeds it from s = 48
    const j = judgeEngine(engine((s) => (s < 30 ? 1.001 : 1 + 0.004 * (s - 30)), () => 1e-6), limits);
    expect(j).toMatchObject({ verdict: "drifts", worst: "token_mult_prob_error", driftsFrom: 48 });
    expect(engineVerdict(j, limits)).toMatch(/^vllm drifts from its trainer from step 48 \(token_mult_prob_error above 1\.05/);
    const kl = judgeEngine(engine(() => 1.0001, (s) => (s < 20 ? 1e-5 : 0.01)), limits);
    expect(kl).toMatchObject({ verdict: "drifts", worst: "gen_kl_error", driftsFrom: 24 });
  });

  it("strays when some steps are over but not for long, and has no verdict without figures", () => {
    const j = judgeEngine(engine((s) => (s % 5 === 0 ? 1.2 : 1.001), () => 1e-6), limits);
    expect(j.verdict).toBe("strays");
    const none = judgeEngine({ backend: "torch", runs: 1, tmpe: { steps: [], cols: [] }, genKl: { steps: [], cols: [] } }, limits);
    expect(none.verdict).toBeNull();
    expect(engineVerdict(none, limits)).toBe("torch: no engine-vs-trainer figures yet");
  });
});
