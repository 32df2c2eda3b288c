import { useConfigDiffs } from "../api/experiments";
import type { Run } from "../api/types";
import { formatValue } from "../lib/format";
import { BackendTag } from "../runs/StateBadge";
import { ErrorBox, Loading } from "../ui/States";
import { diffColumns } from "./configColumns";

/** Each run's effective config (backend and seed included), only the keys that differ, at
 * most 12 columns. */
export function ConfigDiffTable({ runs }: { runs: Run[] }) {
  const shown = runs.filter((r) => r.config).slice(0, 12);
  const columns = shown.map((r) => r.config!);
  const base = columns[0] ?? null;
  const others = [...new Set(columns)].filter((id) => id !== base);
  const diffs = useConfigDiffs(base, others);
  if (diffs.error) return <ErrorBox error={diffs.error} />;
  if (!diffs.data) return <Loading what="Loading configs" />;
  const rows = base === null ? [] : diffColumns(base, columns, diffs.data);
  if (!rows.length) return <p className="muted">The runs share one config.</p>;
  return (
    <div className="table-scroll">
      <table className="compact diff-table" data-testid="config-diff">
        <thead><tr><th>Key</th>{shown.map((r) => <th key={r.id}><BackendTag backend={r.backend} /> #{r.id}</th>)}</tr></thead>
        <tbody>
          {rows.map((d) => (
            <tr key={d.path}><td><code>{d.path}</code></td>
              {d.values.map((v, i) => <td key={i} className="mono">{formatValue(v)}</td>)}</tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
