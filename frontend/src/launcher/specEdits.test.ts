import { describe, expect, it } from "vitest";
import { editsOf, specChanges } from "./specEdits";

describe("specChanges", () => {
  it("lists only the paths that differ, lists compared whole", () => {
    const a = { rollout: { backend: "torch", temperature: 1 }, train: { steps: 50, betas: [0.9, 0.999] }, seed: 0 };
    const b = { rollout: { backend: "vllm", temperature: 1 }, train: { steps: 50, betas: [0.9, 0.99] }, seed: 0 };
    expect(specChanges(a, b)).toEqual([
      { path: "rollout.backend", a: "torch", b: "vllm" },
      { path: "train.betas", a: [0.9, 0.999], b: [0.9, 0.99] },
    ]);
  });

  it("names the side that has a key the other lacks, as the server does", () => {
    expect(specChanges({ a: { b: 1, c: 2 } }, { a: { c: 2, d: null } })).toEqual([
      { path: "a.b", a: 1, b: null, only_in: "a" },
      { path: "a.d", a: null, b: null, only_in: "b" },
    ]);
    // an empty object is a value of its own, not nothing
    expect(specChanges({ x: {} }, { x: { y: 1 } })).toEqual([
      { path: "x", a: {}, b: null, only_in: "a" }, { path: "x.y", a: null, b: 1, only_in: "b" },
    ]);
  });

  it("makes edits of every change but a deleted key", () => {
    const changes = specChanges({ train: { steps: 40, lr: 1e-4 } }, { train: { steps: 60 }, note: "x" });
    expect(editsOf(changes)).toEqual({ "train.steps": 60, note: "x" });
  });
});
