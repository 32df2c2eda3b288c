// A chart panel whose uPlot code arrives in its own chunk, after the page is interactive.
import { lazy, Suspense } from "react";
import type { ChartProps } from "./chartTypes";

const UPlotChart = lazy(() => import("./UPlotChart"));

export function Chart(props: ChartProps) {
  const hasData = props.data[0].length > 0;
  return (
    <figure className="chart-panel" data-testid={`chart-${props.title}`} data-points={props.data[0].length}>
      <figcaption>{props.title}</figcaption>
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
