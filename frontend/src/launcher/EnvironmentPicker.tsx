import type { Cluster } from "../api/types";

/** `env.name`, from the environments the chosen cluster offers (or any of the team's when
 * none is chosen); none: one turn a sample. The environment's typed keys follow in the
 * form once one is picked. */
export function EnvironmentPicker({ offered, current, cluster, error, onPick }: {
  offered: string[];
  /** the spec's env.name, or null without an environment */
  current: string | null;
  cluster: Cluster | null;
  error?: string;
  onPick: (name: string | null) => void;
}) {
  const where = cluster ? `cluster ${cluster.name}` : "the team's clusters";
  return (
    <div className={`field env-picker ${error ? "has-error" : ""}`} data-field="env.name">
      <label htmlFor="f-env.name" title="env.name">Environment</label>
      <select id="f-env.name" aria-label="Environment" value={current ?? ""}
        onChange={(e) => onPick(e.target.value || null)}>
        <option value="">none: one turn a sample</option>
        {offered.map((name) => <option key={name} value={name}>{name}</option>)}
        {current && !offered.includes(current) && <option value={current}>{current} (not offered by {where})</option>}
      </select>
      {offered.length > 0 ? (
        <span className="help" data-testid="environments">
          offered by {where}: {offered.map((name, i) => <span key={name}>{i > 0 && ", "}<code>{name}</code></span>)}
        </span>
      ) : (
        <span className="help warn" data-testid="environments" role="note">
          {cluster ? `Cluster ${cluster.name} offers no environment` : "No cluster of the team offers an environment"}: runs are one
          turn a sample. A cluster lists the environments installed where its jobs run (docs/environments.md).
        </span>
      )}
      {error && <span className="field-error" role="alert">{error}</span>}
    </div>
  );
}
