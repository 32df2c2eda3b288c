// Which metrics the run page draws, and how a panel's series become uPlot data: x-axis
// choice, EMA smoothing with the raw line as a faint shadow, log scale.
import type { XAxis } from "../api/types";
import type { ChartProps, ChartSeries } from "./chartTypes";
import { colorAt } from "./palette";
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
];

export const TOKENS_KEY = "tokens/total";

export const ALL_RUN_KEYS = [...new Set([...RUN_PANELS.flatMap((p) => p.keys), TOKENS_KEY])];

export interface ViewOptions {
  axis: XAxis;
  smoothing: number;
  logY: boolean;
  /** fit the y axis to the bulk of the values (robustRange) instead of every value */
  ignoreOutliers?: boolean;
}

/** The chart of one panel of one run. Keys without points are left out. */
export function panelChart(panel: PanelSpec, series: Map<string, Series>, view: ViewOptions,
  syncKey?: string): ChartProps {
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
  return {
    title: panel.title,
    data: lines.length ? alignSeries(lines) : [[]],
    series: specs,
    xKind: view.axis,
    logY,
    yRange: view.ignoreOutliers && !logY ? robustRange(lines.map((l) => l.y)) : null,
    syncKey,
    emptyText: view.axis === "tokens" && !tokens ? "no tokens/total reported" : undefined,
  };
}
