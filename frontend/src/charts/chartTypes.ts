// The props of a chart, kept apart from uPlot so pages can build them without loading it.

export interface ChartSeries {
  label: string;
  color: string;
  width?: number;
  /** draw faintly (raw line behind a smoothed one, a seed behind the mean) */
  faint?: boolean;
  /** not in the legend (a band edge, a shadow) */
  hidden?: boolean;
  dash?: number[];
}

export interface ChartBand {
  /** indices into `series` (1-based like the data: 0 is x) of the upper and lower edge */
  upper: number;
  lower: number;
  color: string;
}

export interface ChartProps {
  title: string;
  /** [x, ...ys], every y as long as x; null is a gap */
  data: [number[], ...(number | null)[][]];
  series: ChartSeries[];
  bands?: ChartBand[];
  /** elapsed: seconds since the start of each run (compare view) */
  xKind: "step" | "time" | "tokens" | "elapsed";
  logY?: boolean;
  /** a fixed y range (ignore outliers); default: fit every value */
  yRange?: [number, number] | null;
  height?: number;
  /** charts with the same key share a cursor (hover one, read all) */
  syncKey?: string;
  /** what the panel says instead of a chart when it has no points (default "no points yet") */
  emptyText?: string;
  /** a line under the title beside a chart (why a metric is constant, say) */
  note?: string;
  /** the user zoomed the x axis to [min, max] (drag), or reset it (null: double-click) */
  onZoom?: (range: [number, number] | null) => void;
}
