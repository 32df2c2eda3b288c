import { describe, expect, it } from "vitest";
import { newDraft, parseValues, sweepRequest, type SweepDraft } from "./sweepDraft";

const base = { team: 1, name: "rank x lr", description: "", tags: [], spec: { train: { steps: 5 } }, cluster: null };

describe("parseValues", () => {
  it("reads a list as JSON values, else as text", () => {
    expect(parseValues("8, 16")).toEqual([8, 16]);
    expect(parseValues("1e-3,3e-3")).toEqual([0.001, 0.003]);
    expect(parseValues("grpo, rloo")).toEqual(["grpo", "rloo"]);
    expect(parseValues("true,false,null")).toEqual([true, false, null]);
  });

  it("reads a range with its flags", () => {
    expect(parseValues("log:1e-4..1e-2")).toEqual({ min: 1e-4, max: 1e-2, log: true, int: false });
    expect(parseValues("int:4..64")).toEqual({ min: 4, max: 64, log: false, int: true });
    expect(parseValues("-1..1.5")).toEqual({ min: -1, max: 1.5, log: false, int: false });
    expect(parseValues("a..b")).toBe("a..b: a range is of numbers");
    expect(parseValues("  ")).toMatch(/give values/);
  });
});

describe("sweepRequest", () => {
  it("makes the body the API takes from the default draft", () => {
    const { body, errors } = sweepRequest(newDraft(), base);
    expect(errors).toEqual({});
    expect(body).toEqual({
      ...base, method: "grid", params: { "lora.r": [8, 16], "train.lr": [0.001, 0.003] }, budget: {},
      metric: "reward/mean", mode: "max", early_stopping: { rule: "median", min_steps: 10 }, validate_only: false,
    });
  });

  it("names the field of each problem as the server would", () => {
    const draft: SweepDraft = {
      ...newDraft(), method: "random", rule: "threshold", minSteps: "", threshold: "",
      params: [{ key: "train.lr", values: "" }, { key: "", values: "ignored" }],
    };
    const { body, errors } = sweepRequest(draft, base);
    expect(body).toBeNull();
    expect(Object.keys(errors).sort()).toEqual(["budget.members", "early_stopping.min_steps",
      "early_stopping.threshold", "params.train.lr"]);
  });

  it("sends the budget, parallel and the rule's own settings when given", () => {
    const draft: SweepDraft = { ...newDraft(), method: "random", members: "6", gpuHours: "2.5", parallel: "3",
      minMembers: "2", params: [{ key: "train.lr", values: "log:1e-4..1e-2" }] };
    const { body } = sweepRequest(draft, base);
    expect(body).toMatchObject({ budget: { members: 6, gpu_hours: 2.5 }, parallel: 3,
      early_stopping: { rule: "median", min_steps: 10, min_members: 2 } });
    const none = sweepRequest({ ...newDraft(), rule: "none" }, base).body;
    expect(none?.early_stopping).toBeNull();
    expect(sweepRequest({ ...newDraft(), params: [] }, base).errors).toEqual({ params: "give at least one key to search over" });
  });
});
