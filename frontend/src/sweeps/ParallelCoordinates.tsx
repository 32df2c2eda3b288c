// The parallel-coordinates plot of a sweep, as SVG: its own chunk, loaded with the sweep
// page's plot (SweepPage.tsx), the layout worked out in parallel.ts. Lines are shaded
// from the worst (light) to the best (dark) value of the metric; the best member's line is
// drawn last and thick; a member without the metric yet is a dashed grey line.
import { useMemo } from "react";
import { goodness, parallelCoordinates, type Row } from "./parallel";

const WIDTH = 880, HEIGHT = 300, PAD_X = 70, PAD_TOP = 28, PAD_BOTTOM = 22;

function shade(g: number | null): string {
  if (g === null) return "#9aa3ae";
  // from a light teal to the accent's dark one
  const mix = (a: number, b: number) => Math.round(a + (b - a) * g);
  return `rgb(${mix(180, 22)}, ${mix(222, 84)}, ${mix(210, 66)})`;
}

export interface ParallelCoordinatesProps {
  rows: Row[];
  keys: string[];
  metric: string;
  mode: "max" | "min";
  best: number | null;
}

export default function ParallelCoordinates({ rows, keys, metric, mode, best }: ParallelCoordinatesProps) {
  const { axes, lines } = useMemo(() => parallelCoordinates(rows, [...keys, metric]), [rows, keys, metric]);
  const x = (i: number) => PAD_X + (axes.length === 1 ? 0 : (i * (WIDTH - 2 * PAD_X)) / (axes.length - 1));
  const y = (at: number) => PAD_TOP + (1 - at) * (HEIGHT - PAD_TOP - PAD_BOTTOM);
  const metricAxis = axes.length - 1;
  const ordered = [...lines].sort((a, b) => (a.index === best ? 1 : 0) - (b.index === best ? 1 : 0));
  return (
    <svg className="parallel-coordinates" viewBox={`0 0 ${WIDTH} ${HEIGHT}`} role="img"
      aria-label={`${keys.join(", ")} against ${metric}`} data-testid="parallel-coordinates">
      {ordered.map((line) => {
        const g = goodness(line.points[metricAxis], mode);
        // a line stops where a value is missing (the metric not reported yet)
        const drawn = line.points.map((p, i) => (p === null ? null : `${x(i)},${y(p)}`));
        const cut = drawn.indexOf(null);
        const points = (cut < 0 ? drawn : drawn.slice(0, cut)).join(" ");
        const isBest = line.index === best;
        return (
          <polyline key={line.index} points={points} fill="none" stroke={shade(g)}
            strokeWidth={isBest ? 3.5 : 1.6} strokeDasharray={g === null ? "4 3" : undefined}
            data-testid="pc-line" data-member={line.index} data-best={isBest || undefined}>
            <title>{`member ${line.index}${isBest ? " (best)" : ""}`}</title>
          </polyline>
        );
      })}
      {axes.map((axis, i) => (
        <g key={axis.key} className="pc-axis" data-testid="pc-axis" data-key={axis.key}>
          <line x1={x(i)} x2={x(i)} y1={y(0)} y2={y(1)} stroke="#4b5563" />
          <text x={x(i)} y={PAD_TOP - 12} textAnchor="middle" className="pc-axis-label">
            {axis.key}{axis.kind === "log" ? " (log)" : ""}
          </text>
          {axis.ticks.map((t) => (
            <text key={t.label} x={x(i) - 6} y={y(t.at) + 4} textAnchor="end" className="pc-tick">{t.label}</text>
          ))}
        </g>
      ))}
    </svg>
  );
}
