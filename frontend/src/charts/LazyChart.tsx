// A chart panel whose uPlot code arrives in its own chunk, after the page is interactive.
import { Suspense } from "react";
import { preloadable } from "../lib/preloadable";
import type { ChartProps } from "./chartTypes";

const uplot = preloadable(() => import("./UPlotChart"));
const UPlotChart = uplot.Component;

/** Starts loading uPlot now (a page that will surely draw charts calls this when its own
 * code loads), so the chunk does not wait for the data before it is requested, and the
 * first chart renders without suspending. */
export function preloadCharts(): void {
  void uplot.preload();
}

export function Chart(props: ChartProps) {
  const hasData = props.data[0].length > 0;
  return (
    <figure className="chart-panel" data-testid={`chart-${props.title}`} data-points={props.data[0].length}>
      <figcaption>{props.title}{props.note && <span className="chart-note muted small"> · {props.note}</span>}</figcaption>
      {hasData ? (
        <Suspense fallback={<div className="chart-placeholder" style={{ height: props.height ?? 200 }} />}>
          <UPlotChart {...props} />
        </Suspense>
      ) : (
        <div className="chart-placeholder empty" style={{ height: props.height ?? 200 }}>
          {props.emptyText ?? "no points yet"}
        </div>
      )}
    </figure>
  );
}
