// uPlot behind a React component (loaded lazily: see LazyChart). The chart is built once per
// shape (series, scales) and afterwards only fed new data, so a live update costs one
// setData. Drag to zoom, double-click to reset; a zoomed chart keeps its zoom while points
// stream in.
import { useEffect, useMemo, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import type { ChartProps } from "./chartTypes";
import { withAlpha } from "./palette";
import { flatYRange, loneXRange, showMarkers, yAxisWidth } from "./ranges";
import { formatDuration, formatNumber, formatTicks } from "../lib/format";

function axisValues(kind: ChartProps["xKind"]) {
  if (kind === "tokens" || kind === "step") {
    return (_u: uPlot, splits: number[], _i: number, _space: number, incr: number) => formatTicks(splits, incr);
  }
  if (kind === "elapsed") return (_u: uPlot, splits: number[]) => splits.map((v) => formatDuration(v));
  return undefined;
}

function options(props: ChartProps, width: number, yRange: { current: ChartProps["yRange"] }): uPlot.Options {
  const { series, bands, xKind, logY, height = 200, syncKey } = props;
  return {
    width,
    height,
    pxAlign: 0,
    cursor: {
      sync: syncKey ? { key: syncKey, setSeries: false } : undefined,
      drag: { x: true, y: false, setScale: true },
      points: { size: 5 },
    },
    legend: { live: true },
    scales: {
      // one x (a single point): a window around it in the axis's unit, centred (uPlot's own
      // is ±100% of the value, or a day after it on a time axis)
      x: { time: xKind === "time", range: (u, min, max) => {
        const x = u.data[0];
        return (x.length ? loneXRange(x[0], x[x.length - 1], xKind) : null) ?? [min, max];
      } },
      // read through a ref: the range follows the data without rebuilding the chart; a flat
      // series gets a padded range around its value (uPlot's would span only float noise)
      y: logY ? {
        distr: 3,
        range: (_u, min, max) => flatYRange(min, max, true) ?? uPlot.rangeLog(min, max, 10, false),
      } : {
        auto: true,
        range: (_u, min, max) => yRange.current ?? flatYRange(min, max) ?? uPlot.rangeNum(min, max, 0.1, true),
      },
    },
    axes: [
      { stroke: "#6b7280", grid: { stroke: "#eef0f3", width: 1 }, ticks: { stroke: "#e5e7eb" },
        values: axisValues(xKind), size: 32 },
      { stroke: "#6b7280", grid: { stroke: "#eef0f3", width: 1 }, ticks: { stroke: "#e5e7eb" },
        size: (_u, values) => yAxisWidth(values), values: (_u, splits, _i, _space, incr) =>
          (logY ? splits.map((v) => (v === null ? "" : formatNumber(v, 3))) : formatTicks(splits, incr)) },
    ],
    series: [
      { label: xKind,
        value: xKind === "elapsed" ? (_u: uPlot, v: number | null) => (v === null ? "—" : formatDuration(v))
          : xKind === "time" ? undefined : (_u: uPlot, v: number | null) => formatNumber(v, 6) },
      ...series.map((s) => ({
        label: s.label,
        stroke: s.faint ? withAlpha(s.color, 0.22) : s.color,
        width: s.width ?? (s.faint ? 1 : 1.6),
        dash: s.dash,
        show: true,
        spanGaps: true,
        // markers only where they help: where the values are sparse, and on a lone value
        // (which has no line to draw)
        points: s.faint || s.hidden ? { show: false } : {
          show: (u: uPlot, si: number, i0: number, i1: number) =>
            showMarkers(u.data[si], i0, i1, u.bbox.width / (window.devicePixelRatio || 1)),
        },
        value: (_u: uPlot, v: number | null) => formatNumber(v, 4),
      } as uPlot.Series)),
    ],
    bands: bands?.map((b) => ({ series: [b.upper, b.lower] as [number, number], fill: withAlpha(b.color, 0.14) })),
  };
}

export default function UPlotChart(props: ChartProps) {
  const host = useRef<HTMLDivElement>(null);
  const chart = useRef<uPlot | null>(null);
  const zoomed = useRef(false);
  const yRange = useRef(props.yRange);
  yRange.current = props.yRange;
  const onZoom = useRef(props.onZoom);
  onZoom.current = props.onZoom;
  const { data, series, bands, xKind, logY, height, syncKey } = props;
  // Rebuild only when the shape changes, never for new points.
  const shape = useMemo(
    () => JSON.stringify({ series, bands, xKind, logY, height, syncKey }),
    [series, bands, xKind, logY, height, syncKey],
  );

  useEffect(() => {
    const el = host.current!;
    const opts = options(props, Math.max(200, el.clientWidth), yRange);
    let reported = "";
    opts.hooks = {
      setSelect: [() => { zoomed.current = true; }],
      // a drag sets the selection, then the x scale: report the new range once
      setScale: [(u, key) => {
        const { min, max } = u.scales.x;
        if (key !== "x" || !zoomed.current || min == null || max == null) return;
        if (reported === `${min}:${max}`) return;
        reported = `${min}:${max}`;
        onZoom.current?.([min, max]);
      }],
      ready: [(u) => {
        u.over.addEventListener("dblclick", () => {
          zoomed.current = false;
          reported = "";
          onZoom.current?.(null);
        });
        // uPlot has no per-series legend switch: hide the rows of shadows and band edges
        const rows = u.root.querySelectorAll<HTMLElement>(".u-legend .u-series");
        props.series.forEach((s, i) => { if (s.hidden && rows[i + 1]) rows[i + 1].style.display = "none"; });
      }],
    };
    const u = new uPlot(opts, props.data as uPlot.AlignedData, el);
    chart.current = u;
    zoomed.current = false;
    const observer = new ResizeObserver(() => {
      const w = Math.max(200, el.clientWidth);
      if (w !== u.width) u.setSize({ width: w, height: u.height });
    });
    observer.observe(el);
    return () => {
      observer.disconnect();
      u.destroy();
      chart.current = null;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps -- rebuilt by shape only
  }, [shape]);

  // a new fixed range (ignore outliers) is applied by a data update, which re-ranges y
  const [yLo, yHi] = props.yRange ?? [null, null];
  useEffect(() => {
    chart.current?.setData(data as uPlot.AlignedData, !zoomed.current);
  }, [data, yLo, yHi]);

  return <div ref={host} className="uplot-host" />;
}
