import { describe, expect, it } from "vitest";
import type { Sample } from "../api/types";
import { termDetails, termKeys } from "./sampleTerms";

const sample = (terms?: Record<string, number>, details?: Sample["details"]): Sample =>
  ({ prompt: "p", completion: "c", reward: 0, advantage: 0, terms, details });

describe("reward term columns", () => {
  it("lists each term once, in the spec's order", () => {
    const items = [sample({ math_verify: 1, format: 0 }), sample({ math_verify: 0, format: 1, overlong_penalty: -0.5 })];
    expect(termKeys(items)).toEqual(["math_verify", "format", "overlong_penalty"]);
  });
  it("has no columns for samples from before per-term scores", () => {
    expect(termKeys([sample(), sample()])).toEqual([]);
  });
  it("shows what a term saw", () => {
    const item = sample({ gsm8k: 1 }, { gsm8k: { extracted: "1200", gold: "1,200" }, overlong_penalty: { tokens: 14, max: 16 } });
    expect(termDetails(item, "gsm8k")).toBe("extracted: 1200\ngold: 1,200");
    expect(termDetails(item, "overlong_penalty")).toBe("tokens: 14\nmax: 16");
    expect(termDetails(item, "format")).toBe("");
  });
});
