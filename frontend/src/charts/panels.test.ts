import { describe, expect, it } from "vitest";
import { EPISODE_METRICS } from "../api/types";
import { EPISODE_PANELS, panelChart, RUN_PANELS, runPanelGroups, type ViewOptions } from "./panels";
import { panelReason, specValue } from "./panelReasons";
import type { Series } from "./series";

const view: ViewOptions = { axis: "step", smoothing: 0, logY: false };
const line = (values: number[]): Series => ({
  step: values.map((_, i) => i + 1), value: values, time: values.map((_, i) => 1000 + i),
});

describe("runPanelGroups", () => {
  it("puts the curated panels first, then one panel per other key grouped by prefix", () => {
    const keys = ["reward/mean", "time/step_s", "time/cpu_s", "reward/exact_match/mean", "loss/total",
      "adapter_version", "eval/accuracy", "is_weight/mean", "tokens/total", "time/wait_s"];
    const groups = runPanelGroups(keys);
    expect(groups[0]).toEqual({ title: "", panels: RUN_PANELS });
    expect(groups.slice(1).map((g) => [g.title, g.panels.map((p) => p.title)])).toEqual([
      ["is_weight", ["is_weight/mean"]],
      ["loss", ["loss/total"]],
      ["reward", ["reward/exact_match/mean"]],
      ["time", ["time/cpu_s", "time/wait_s"]],
      ["tokens", ["tokens/total"]],
      ["other", ["adapter_version"]],
    ]);
  });
  it("draws every key exactly once", () => {
    const keys = ["grad_norm", "entropy", "response_length/mean", "clip_frac/low", "clip_frac/high", "reward/std",
      "gen_kl_error", "kl", "loss/kl", "staleness/dropped_groups", "throughput/tokens_per_s"];
    const drawn = runPanelGroups(keys).flatMap((g) => g.panels.flatMap((p) => p.keys));
    for (const key of keys) expect(drawn.filter((k) => k === key)).toHaveLength(1);
    // the never-plotted keys are curated now
    const curated = new Set(RUN_PANELS.flatMap((p) => p.keys));
    for (const key of ["grad_norm", "entropy", "response_length/mean", "clip_frac/low", "clip_frac/high",
      "reward/std", "gen_kl_error"]) expect(curated.has(key)).toBe(true);
  });
  it("keeps panel titles unique (they are the charts' test ids and React keys)", () => {
    const titles = runPanelGroups(["kl", "loss/total", "token_mult_prob_error", "x", "other/x"])
      .flatMap((g) => g.panels.map((p) => p.title));
    expect(new Set(titles).size).toBe(titles.length);
  });
  it("draws an environment run's episode metrics in their own titled panels, each name once", () => {
    const keys = [...EPISODE_METRICS, "episode/new_counter", "reward/mean", "time/step_s"];
    const groups = runPanelGroups(keys);
    expect(groups.map((g) => g.title)).toEqual(["", "episode"]);
    const episode = groups[1].panels;
    expect(episode.map((p) => p.title)).toEqual([...EPISODE_PANELS.map((p) => p.title), "episode/new_counter"]);
    // every name workers/names.py defines is drawn, exactly once
    const drawn = episode.flatMap((p) => p.keys);
    for (const key of EPISODE_METRICS) expect(drawn.filter((k) => k === key)).toHaveLength(1);
    expect(drawn).toHaveLength(EPISODE_METRICS.length + 1);
  });
  it("leaves out a family's panels whose keys the run does not report, and the family without any", () => {
    const groups = runPanelGroups(["episode/tool_errors", "episode/failed"]);
    expect(groups[1].panels.map((p) => [p.title, p.keys])).toEqual([
      ["Tool calls", ["episode/tool_calls", "episode/tool_errors"]], ["Failed episodes", ["episode/failed"]]]);
    expect(runPanelGroups(["reward/mean", "loss/total"]).map((g) => g.title)).toEqual(["", "loss"]);
  });
  it("allows a log scale on durations and rates only", () => {
    const panels = runPanelGroups(["time/cpu_s", "loss/total"]).slice(1).flatMap((g) => g.panels);
    expect(panels.map((p) => [p.title, p.logOk])).toEqual([["loss/total", false], ["time/cpu_s", true]]);
  });
});

describe("panelReason", () => {
  it("says kl_coef is 0 for the KL keys, nothing when the term is on or no spec is known", () => {
    expect(panelReason(["kl"], { algorithm: { kl_coef: 0 } })).toBe("kl_coef is 0 (no KL term in the loss)");
    expect(panelReason(["kl"], { algorithm: { kl_coef: 0.05 } })).toBeNull();
    expect(panelReason(["kl"], null)).toBeNull();
    // an older spec without the field: spec.py's default, 0
    expect(panelReason(["loss/kl"], { algorithm: {} })).toBe("kl_coef is 0 (no KL term in the loss)");
  });
  it("names the affected keys when the panel has others", () => {
    const spec = { train: { eval_every: 0 }, reward: { functions: [{ name: "exact_match" }] } };
    expect(panelReason(["accuracy", "eval/accuracy"], spec))
      .toBe("eval/accuracy: eval_every is 0 (scored at the start and the end only)");
  });
  it("knows verifier terms from shaping ones", () => {
    const shaping = { reward: { functions: [{ name: "format" }, { name: "overlong_penalty" }] } };
    expect(panelReason(["accuracy"], shaping)).toBe("no verifier term in reward.functions (accuracy needs one)");
    const judged = { reward: { functions: [{ name: "format" }, { name: "service", correct_threshold: 0.5 }] } };
    expect(panelReason(["accuracy"], judged)).toBeNull();
    const unjudged = { reward: { functions: [{ name: "service", correct_threshold: null }] } };
    expect(panelReason(["accuracy"], unjudged)).not.toBeNull();
    expect(panelReason(["accuracy"], { reward: { functions: [{ name: "math_verify" }] } })).toBeNull();
  });
  it("says staleness is always 0 in a synchronous run", () => {
    const zeros = () => [0, 0, 0];
    expect(panelReason(["staleness/mean", "staleness/max"], { async: { enabled: false } }, zeros))
      .toBe("async is off (staleness is always 0)");
    expect(panelReason(["staleness/mean"], { async: { enabled: true } }, zeros)).toBeNull();
  });
  it("keeps quiet when the data contradict the reason", () => {
    const off = { algorithm: { kl_coef: 0 }, async: { enabled: false }, train: { eval_every: 0 } };
    expect(panelReason(["kl"], off, () => [0.01, 0.02])).toBeNull();
    expect(panelReason(["staleness/mean"], off, () => [0, 0.5])).toBeNull();
    expect(panelReason(["eval/accuracy"], off, () => [0.1, 0.2, 0.3])).toBeNull();
    expect(panelReason(["eval/accuracy"], off, () => [0.1, 0.3])).not.toBeNull();
  });
  it("reads dotted paths with fallbacks", () => {
    expect(specValue({ a: { b: 2 } }, "a.b", 0)).toBe(2);
    expect(specValue({ a: null }, "a.b", 7)).toBe(7);
    expect(specValue({}, "a.b.c", "x")).toBe("x");
  });
});

describe("panelChart", () => {
  const kl = RUN_PANELS.find((p) => p.title === "KL")!;
  const staleness = RUN_PANELS.find((p) => p.title === "Staleness")!;
  it("puts the reason in place of the chart when the panel has no points", () => {
    const chart = panelChart(kl, new Map(), view, undefined, { algorithm: { kl_coef: 0 } });
    expect(chart.data[0]).toHaveLength(0);
    expect(chart.emptyText).toBe("kl_coef is 0 (no KL term in the loss)");
    expect(chart.note).toBeUndefined();
    expect(panelChart(kl, new Map(), view).emptyText).toBeUndefined(); // "no points yet"
  });
  it("says nothing beside a curve that contradicts the spec (a job that logs kl anyway)", () => {
    const chart = panelChart(kl, new Map([["kl", line([0.01, 0.02])]]), view, undefined, { algorithm: { kl_coef: 0 } });
    expect(chart.note).toBeUndefined();
  });
  it("puts it under the title beside a constant line", () => {
    const series = new Map([["staleness/mean", line([0, 0, 0])], ["staleness/max", line([0, 0, 0])]]);
    const chart = panelChart(staleness, series, view, undefined, { async: { enabled: false } });
    expect(chart.data).toEqual([[1, 2, 3], [0, 0, 0], [0, 0, 0]]);
    expect(chart.note).toBe("async is off (staleness is always 0)");
  });
  it("draws a single point", () => {
    const chart = panelChart({ title: "grad_norm", keys: ["grad_norm"] }, new Map([["grad_norm", line([0.7])]]), view);
    expect(chart.data).toEqual([[1], [0.7]]);
  });
});
