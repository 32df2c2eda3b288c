// The launcher's sweep section: the search space (a spec key and its values per row), the
// method, budget, parallel members, the objective and the early-stopping rule, as typed
// (sweepDraft.ts turns it into the request; the launcher asks the server to check it).
import type { SweepDraft } from "./sweepDraft";

export function SweepSection({ draft, onChange, errors }: {
  draft: SweepDraft; onChange: (next: SweepDraft) => void; errors: ReadonlyMap<string, string>;
}) {
  const set = <K extends keyof SweepDraft>(key: K, value: SweepDraft[K]) => onChange({ ...draft, [key]: value });
  const setRow = (i: number, row: Partial<SweepDraft["params"][number]>) =>
    set("params", draft.params.map((r, j) => (j === i ? { ...r, ...row } : r)));
  const error = (field: string) => errors.get(field) && <div className="field-error">{errors.get(field)}</div>;
  return (
    <div className="sweep-section" data-testid="sweep-section">
      <p className="muted small">
        Members differ in the keys below and share the rest of the spec, one base model and one engine
        (the spec's <code>rollout.backend</code>): they run in a pool, <em>parallel</em> at a time.
        Values: <code>8, 16</code>; a random search also takes ranges, <code>log:1e-4..1e-2</code> or <code>int:4..64</code>.
      </p>
      <div className="row">
        <label>Method
          <select aria-label="Sweep method" value={draft.method} onChange={(e) => set("method", e.target.value as SweepDraft["method"])}>
            <option value="grid">grid: every combination</option>
            <option value="random">random: draws</option>
          </select>
        </label>
        <label>Members<input className="num narrow" aria-label="Sweep members" value={draft.members}
          placeholder={draft.method === "grid" ? "grid size" : "required"} onChange={(e) => set("members", e.target.value)} /></label>
        <label>At once<input className="num narrow" aria-label="Members at once" value={draft.parallel}
          placeholder="a pool's" onChange={(e) => set("parallel", e.target.value)} /></label>
        <label>GPU-hours<input className="num narrow" aria-label="GPU-hour budget" value={draft.gpuHours}
          placeholder="no limit" onChange={(e) => set("gpuHours", e.target.value)} /></label>
      </div>
      {error("budget.members")}{error("budget.gpu_hours")}{error("parallel")}
      {draft.params.map((row, i) => (
        <div key={i}>
          <div className="param-row" data-testid="sweep-param">
            <label className="grow">Key<input aria-label={`Sweep key ${i + 1}`} value={row.key} placeholder="lora.r"
              onChange={(e) => setRow(i, { key: e.target.value })} /></label>
            <label className="grow">Values<input aria-label={`Sweep values ${i + 1}`} value={row.values} placeholder="8, 16"
              onChange={(e) => setRow(i, { values: e.target.value })} /></label>
            <button type="button" className="btn ghost small" aria-label={`Remove key ${i + 1}`}
              onClick={() => set("params", draft.params.filter((_, j) => j !== i))}>✕</button>
          </div>
          {error(`params.${row.key.trim()}`)}
        </div>
      ))}
      {error("params")}
      <div><button type="button" className="btn small" onClick={() => set("params", [...draft.params, { key: "", values: "" }])}>
        Add a key</button></div>
      <div className="row">
        <label className="grow">Metric<input aria-label="Sweep metric" value={draft.metric} onChange={(e) => set("metric", e.target.value)} /></label>
        <label>Best is
          <select aria-label="Sweep mode" value={draft.mode} onChange={(e) => set("mode", e.target.value as SweepDraft["mode"])}>
            <option value="max">max</option><option value="min">min</option>
          </select>
        </label>
        <label>Early stopping
          <select aria-label="Early stopping" value={draft.rule} onChange={(e) => set("rule", e.target.value as SweepDraft["rule"])}>
            <option value="median">median</option><option value="threshold">threshold</option><option value="none">none</option>
          </select>
        </label>
        {draft.rule !== "none" && <label>After steps<input className="num narrow" aria-label="Stop after steps"
          value={draft.minSteps} onChange={(e) => set("minSteps", e.target.value)} /></label>}
        {draft.rule === "median" && <label>Others<input className="num narrow" aria-label="Median others" value={draft.minMembers}
          placeholder="3" onChange={(e) => set("minMembers", e.target.value)} /></label>}
        {draft.rule === "threshold" && <label>Threshold<input className="num narrow" aria-label="Stop threshold"
          value={draft.threshold} onChange={(e) => set("threshold", e.target.value)} /></label>}
      </div>
      {error("metric")}{error("early_stopping.min_steps")}{error("early_stopping.threshold")}{error("early_stopping.min_members")}
    </div>
  );
}
