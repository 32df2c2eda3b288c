import { stringify } from "yaml";
import { useConfig } from "../api/experiments";
import { Query } from "../ui/States";

export function ConfigView({ configId }: { configId: number | null | undefined }) {
  const result = useConfig(configId);
  if (!configId) return <span className="muted">no config recorded</span>;
  return (
    <Query result={result}>
      {(config) => (
        <>
          <div className="muted small">config {config.id} · <code>{config.hash.slice(0, 12)}</code></div>
          <pre className="yaml">{stringify(config.spec)}</pre>
        </>
      )}
    </Query>
  );
}
