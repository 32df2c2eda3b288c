// Which metrics the run page draws, and how a panel's series become uPlot data: x-axis
// choice, EMA smoothing with the raw line as a faint shadow, log scale. The curated panels
// come first; every other stored key gets a panel of its own, grouped by prefix, except a
// family's (episode/*), whose prefix group draws its own titled panels.
import type { EpisodeMetric, XAxis } from "../api/types";
import type { ChartProps, ChartSeries } from "./chartTypes";
import { colorAt } from "./palette";
import { panelReason } from "./panelReasons";
import type { Series } from "./series";
import { alignSeries, ema, positiveOnly, robustRange, thin, xValues, type XY } from "./transforms";

export interface PanelSpec {
  title: string;
  keys: string[];
  /** a log scale makes sense here (only positive values) */
  logOk?: boolean;
}

export const RUN_PANELS: PanelSpec[] = [
  { title: "Reward", keys: ["reward/mean"] },
  { title: "Accuracy", keys: ["accuracy", "eval/accuracy"] },
  { title: "Policy loss", keys: ["loss/policy"] },
  { title: "KL", keys: ["kl"], logOk: true },
  { title: "token_mult_prob_error", keys: ["token_mult_prob_error"], logOk: true },
  { title: "Staleness", keys: ["staleness/mean", "staleness/max"] },
  { title: "Throughput (tokens/s)", keys: ["throughput/tokens_per_s"], logOk: true },
  { title: "Step time (s)", keys: ["time/step_s", "time/generate_s", "time/train_s", "time/weight_sync_s"], logOk: true },
  { title: "Reward std", keys: ["reward/std"] },
  { title: "Response length (tokens)", keys: ["response_length/mean"] },
  { title: "Entropy", keys: ["entropy"] },
  { title: "Grad norm", keys: ["grad_norm"], logOk: true },
  { title: "Clip fraction", keys: ["clip_frac", "clip_frac/low", "clip_frac/high"] },
  { title: "gen_kl_error", keys: ["gen_kl_error"], logOk: true },
];

/** A run with an environment (docs/environments.md#metrics): its episodes' turns, tool
 * calls, time in the environment, and the episodes cut short or failed. Every name of
 * workers/names.py's EPISODE_METRICS is in one panel (panels.test.ts). */
export const EPISODE_PANELS: (PanelSpec & { keys: EpisodeMetric[] })[] = [
  { title: "Turns per episode", keys: ["episode/turns_mean"] },
  { title: "Tool calls", keys: ["episode/tool_calls", "episode/tool_errors"] },
  { title: "Environment time (s)", keys: ["episode/env_s"], logOk: true },
  { title: "Environment share of an episode", keys: ["episode/env_share"] },
  { title: "Truncated episodes (fraction)", keys: ["episode/truncated_frac"] },
  { title: "Failed episodes", keys: ["episode/failed"] },
];

/** The titled panels of a metric family, by prefix: drawn, in this order, in that prefix's
 * group when the run reports any of their keys; the family's other keys get a panel each. */
export const FAMILY_PANELS: Record<string, PanelSpec[]> = { episode: EPISODE_PANELS };

export interface PanelGroup {
  /** "" for the curated panels, else the keys' prefix ("reward", "time") or "other" */
  title: string;
  panels: PanelSpec[];
}

// keys whose values are durations or rates: positive, so a log scale may apply
const LOG_PREFIXES = new Set(["time", "throughput"]);

/** The run page's panels: the curated ones, then one panel for each other key in `keys`,
 * grouped by the part before the first "/" (keys without one go under "other", last),
 * groups and keys in alphabetical order; a family's group (FAMILY_PANELS) starts with its
 * titled panels that have a key in `keys`. */
export function runPanelGroups(keys: Iterable<string>): PanelGroup[] {
  const curated = new Set(RUN_PANELS.flatMap((p) => p.keys));
  const byPrefix = new Map<string, string[]>();
  for (const key of new Set(keys)) {
    if (curated.has(key)) continue;
    const slash = key.indexOf("/");
    const prefix = slash > 0 ? key.slice(0, slash) : "other";
    byPrefix.set(prefix, [...(byPrefix.get(prefix) ?? []), key]);
  }
  const prefixes = [...byPrefix.keys()].sort((a, b) =>
    a === "other" ? 1 : b === "other" ? -1 : a.localeCompare(b));
  return [
    { title: "", panels: RUN_PANELS },
    ...prefixes.map((prefix) => {
      const present = byPrefix.get(prefix)!;
      const family = (FAMILY_PANELS[prefix] ?? []).filter((p) => p.keys.some((k) => present.includes(k)));
      const titled = new Set(family.flatMap((p) => p.keys));
      return {
        title: prefix,
        panels: [...family, ...present.filter((key) => !titled.has(key)).sort()
          .map((key) => ({ title: key, keys: [key], logOk: LOG_PREFIXES.has(prefix) }))],
      };
    }),
  ];
}

export const TOKENS_KEY = "tokens/total";

export interface ViewOptions {
  axis: XAxis;
  smoothing: number;
  logY: boolean;
  /** fit the y axis to the bulk of the values (robustRange) instead of every value */
  ignoreOutliers?: boolean;
}

/** The chart of one panel of one run. Keys without points are left out. With the run's
 * spec, a panel whose metric is off by configuration says why (panelReasons.ts): in place
 * of the chart when it has no points, under the title when it has (a constant line). */
export function panelChart(panel: PanelSpec, series: Map<string, Series>, view: ViewOptions,
  syncKey?: string, spec?: Record<string, unknown> | null): ChartProps {
  const tokens = series.get(TOKENS_KEY);
  const lines: XY[] = [];
  const specs: ChartSeries[] = [];
  panel.keys.forEach((key, i) => {
    const s = series.get(key);
    if (!s || s.step.length === 0) return;
    const x = xValues(s, view.axis, tokens);
    const raw = view.logY ? positiveOnly(s.value) : s.value;
    const color = colorAt(i);
    if (view.smoothing > 0) {
      lines.push(thin(x, raw));
      specs.push({ label: `${key} (raw)`, color, faint: true, hidden: true });
      lines.push(thin(x, ema(raw, view.smoothing)));
      specs.push({ label: key, color });
    } else {
      lines.push(thin(x, raw));
      specs.push({ label: key, color });
    }
  });
  const logY = view.logY && panel.logOk;
  const reason = panelReason(panel.keys, spec, (key) => series.get(key)?.value);
  const noTokens = view.axis === "tokens" && !tokens;
  return {
    title: panel.title,
    data: lines.length ? alignSeries(lines) : [[]],
    series: specs,
    xKind: view.axis,
    logY,
    yRange: view.ignoreOutliers && !logY ? robustRange(lines.map((l) => l.y)) : null,
    syncKey,
    emptyText: noTokens ? "no tokens/total reported" : reason ?? undefined,
    note: lines.length && reason ? reason : undefined,
  };
}
