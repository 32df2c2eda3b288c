// A tiny SVG line for table cells (uPlot would be overkill for 100 points × 50 rows).
import { minMaxDownsample } from "../charts/transforms";

export function Sparkline({ values, width = 90, height = 22, color = "#0072b2" }: {
  values: readonly number[]; width?: number; height?: number; color?: string;
}) {
  if (values.length < 2) return <svg width={width} height={height} aria-hidden="true" />;
  const drawn = values.length > 2 * width
    ? minMaxDownsample(values.map((_, i) => i), values, width).y as number[] : values;
  let min = Infinity;
  let max = -Infinity;
  for (const v of drawn) { if (v < min) min = v; if (v > max) max = v; }
  const span = max - min || 1;
  const points = drawn.map((v, i) =>
    `${((i / (drawn.length - 1)) * (width - 2) + 1).toFixed(1)},${(height - 1 - ((v - min) / span) * (height - 2)).toFixed(1)}`);
  return (
    <svg width={width} height={height} className="sparkline" aria-hidden="true">
      <polyline points={points.join(" ")} fill="none" stroke={color} strokeWidth="1.3" />
    </svg>
  );
}
