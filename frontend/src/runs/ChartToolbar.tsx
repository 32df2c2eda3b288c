import { useState } from "react";
import type { XAxis } from "../api/types";
import type { ViewOptions } from "../charts/panels";

const KEY = "paddock.chartView";

/** The chart settings, remembered per browser (Aim's default smoothing is 0.6). */
export function useChartView(): [ViewOptions, (v: ViewOptions) => void] {
  const [view, setView] = useState<ViewOptions>(() => {
    try {
      return { axis: "step", smoothing: 0.6, logY: false, ...JSON.parse(localStorage.getItem(KEY) ?? "{}") };
    } catch {
      return { axis: "step", smoothing: 0.6, logY: false };
    }
  });
  return [view, (v) => { localStorage.setItem(KEY, JSON.stringify(v)); setView(v); }];
}

export function ChartToolbar({ view, onChange }: { view: ViewOptions; onChange: (v: ViewOptions) => void }) {
  return (
    <div className="chart-toolbar">
      <label>
        Smoothing
        <input type="range" min={0} max={0.99} step={0.01} value={view.smoothing} aria-label="Smoothing"
          onChange={(e) => onChange({ ...view, smoothing: Number(e.target.value) })} />
        <span className="mono">{view.smoothing.toFixed(2)}</span>
      </label>
      <div className="segmented" role="group" aria-label="x-axis">
        {([["step", "Step"], ["time", "Wall time"], ["tokens", "Tokens"]] as [XAxis, string][]).map(([axis, label]) => (
          <button key={axis} className={view.axis === axis ? "active" : ""} aria-pressed={view.axis === axis}
            onClick={() => onChange({ ...view, axis })}>{label}</button>
        ))}
      </div>
      <label className="check">
        <input type="checkbox" checked={view.logY} onChange={(e) => onChange({ ...view, logY: e.target.checked })} />
        log scale
      </label>
      <label className="check" title="fit the y axis to the values inside Tukey's far-out fences (Q1 − 3·IQR, Q3 + 3·IQR)">
        <input type="checkbox" checked={!!view.ignoreOutliers}
          onChange={(e) => onChange({ ...view, ignoreOutliers: e.target.checked })} />
        ignore outliers
      </label>
      <span className="muted small hint">drag to zoom · double-click to reset</span>
    </div>
  );
}
