import { checkpointDownloadUrl, useCheckpoints } from "../api/runs";
import { formatBytes, timeAgo } from "../lib/format";
import { Empty, Query } from "../ui/States";

/** The run's checkpoints (the run page refetches them when the stream reports a state
 * change, the moment one is written on pause or at the end). */
export function Checkpoints({ runId }: { runId: number }) {
  const result = useCheckpoints(runId);
  return (
    <Query result={result} isEmpty={(d) => d.length === 0}
      empty={<Empty title="No checkpoints yet">One is written on pause, at the end, and every <code>checkpoint.every</code> steps.</Empty>}>
      {(checkpoints) => (
        <table className="compact">
          <thead><tr><th>Step</th><th>Adapter</th><th>Size</th><th>Written</th><th /></tr></thead>
          <tbody>
            {checkpoints.map((cp) => (
              <tr key={cp.id ?? cp.step}>
                <td>{cp.step}</td><td>v{cp.adapter_version}</td><td>{formatBytes(cp.size_bytes)}</td>
                <td className="muted">{timeAgo(cp.created_at)}</td>
                <td><a className="btn small" href={checkpointDownloadUrl(runId, cp)} download>Download</a></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Query>
  );
}
