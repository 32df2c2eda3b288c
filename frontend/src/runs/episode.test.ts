import { describe, expect, it } from "vitest";
import type { EpisodeTurn } from "../api/types";
import { episodeView, searchableText, segmentTurns, spanLabel, versionLabel } from "./episode";

// what workers/envs/metrics.py `episode_turns` sends for a calculator episode: a model turn
// with two calls, the answer of two tool messages (its 18 tokens on the first), the final
// reply after an adapter update in mid-turn
const calculator: EpisodeTurn[] = [
  { role: "model", text: "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 48, \"b\": 39}}</tool_call>…", tokens: 30, masked: false, adapter_version: 3, adapter_versions: [3] },
  { role: "tool", name: "add", text: "87", tokens: 18, masked: true },
  { role: "tool", name: "add", text: "99", tokens: 0, masked: true },
  { role: "model", text: "\\boxed{99}", tokens: 9, masked: false, adapter_version: 3, adapter_versions: [3, 4] },
];

describe("segmentTurns", () => {
  it("keeps model turns, joins one answer's messages, places each in the episode's tokens", () => {
    const segments = segmentTurns(calculator);
    expect(segments.map((s) => s.kind)).toEqual(["model", "answer", "model"]);
    expect(segments.map((s) => (s.kind === "note" ? null : [s.from, s.to]))).toEqual([[0, 30], [30, 48], [48, 57]]);
    const answer = segments[1];
    expect(answer.kind === "answer" && answer.messages).toEqual([
      { role: "tool", name: "add", text: "87" }, { role: "tool", name: "add", text: "99" }]);
    expect(segments[2]).toMatchObject({ kind: "model", turn: 2, masked: false, versions: [3, 4] });
  });

  it("starts a new answer after each model turn, and reads a version without the list", () => {
    const segments = segmentTurns([
      { role: "user", text: "guess a word", tokens: 5, masked: true },
      { role: "model", text: "crane", tokens: 2, masked: false, adapter_version: 0 },
      { role: "user", text: "c_a__", tokens: 6, masked: true },
      { role: "model", text: "cab", tokens: 2, masked: false, adapter_version: -1 },
    ]);
    expect(segments.map((s) => s.kind)).toEqual(["answer", "model", "answer", "model"]);
    expect(segments[1]).toMatchObject({ versions: [0] });
    expect(segments[3]).toMatchObject({ versions: [] }); // -1: not recorded
  });
});

describe("episodeView", () => {
  it("is null for a one-turn sample: the inspector draws it as before", () => {
    expect(episodeView({})).toBeNull();
    expect(episodeView({ turns: [] })).toBeNull();
  });

  it("counts the tokens trained on and the masked spans", () => {
    const view = episodeView({ turns: calculator })!;
    expect(view).toMatchObject({ modelTurns: 2, trained: 39, masked: 18, maskedSpans: [[30, 48]], failed: false });
  });

  it("masks a failed episode whole, adjacent spans merged, and keeps its note", () => {
    const failed = calculator.slice(0, 3).map((t) => ({ ...t, masked: true }));
    const view = episodeView({ turns: [...failed, { role: "env", text: "failed: step timed out after 10 s", masked: true }] })!;
    expect(view).toMatchObject({ trained: 0, masked: 48, maskedSpans: [[0, 48]], failed: true });
    expect(view.segments.at(-1)).toEqual({ kind: "note", text: "failed: step timed out after 10 s" });
  });

  it("leaves empty spans out (a turn cut to nothing by the token budget)", () => {
    const view = episodeView({ turns: [
      { role: "model", text: "a", tokens: 4, masked: false, adapter_version: 1 },
      { role: "tool", text: "cut", tokens: 0, masked: true },
    ] })!;
    expect(view.maskedSpans).toEqual([]);
    expect(view.masked).toBe(0);
  });
});

describe("labels", () => {
  it("names versions and spans", () => {
    expect(versionLabel([3])).toBe("v3");
    expect(versionLabel([3, 4, 5])).toBe("v3→v5");
    expect(versionLabel([])).toBe("—");
    expect(spanLabel(30, 48)).toBe("tokens 30–47");
    expect(spanLabel(4, 5)).toBe("token 4");
    expect(spanLabel(4, 4)).toBe("no tokens");
  });
  it("searches the turns too", () => {
    expect(searchableText({ prompt: "Add 48+39+12.", completion: "\\boxed{99}", turns: calculator })).toContain("87");
  });
});
