import { describe, expect, it } from "vitest";
import { configDiff, flatten } from "./configDiff";

describe("configDiff", () => {
  it("lists only the keys that differ, with every config's value", () => {
    const a = { rollout: { backend: "torch", temperature: 1 }, train: { steps: 50, betas: [0.9, 0.999] }, seed: 0 };
    const b = { rollout: { backend: "vllm", temperature: 1 }, train: { steps: 50, betas: [0.9, 0.99] }, seed: 0 };
    expect(configDiff([a, b])).toEqual([
      { path: "rollout.backend", values: ["torch", "vllm"] },
      { path: "train.betas", values: [[0.9, 0.999], [0.9, 0.99]] },
    ]);
  });

  it("shows a key present on one side only", () => {
    expect(configDiff([{ a: { b: 1 } }, { a: {} }])).toEqual([{ path: "a.b", values: [1, undefined] }]);
  });

  it("flattens nested objects to dotted paths", () => {
    expect([...flatten({ a: { b: { c: 1 } }, d: null })]).toEqual([["a.b.c", 1], ["d", null]]);
  });
});
