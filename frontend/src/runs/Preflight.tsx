// An experiment's pre-flight check (docs/preflight.md): its state, and per engine each check
// with the figure it judged and, when it failed, why; a member may launch the held runs
// anyway. Shown on the run page of its runs and on its compare page, before they start.
import { useMutation } from "@tanstack/react-query";
import { overridePreflight, useExperimentPreflight } from "../api/preflight";
import type { Backend } from "../api/types";
import { useSession } from "../session/SessionContext";
import { ErrorBox } from "../ui/States";
import { BackendTag } from "./StateBadge";

const STATE_TEXT: Record<string, string> = {
  pending: "running: the runs wait for it",
  passed: "passed: the runs were released",
  failed: "failed: the runs are held",
  overridden: "overridden: the runs were launched anyway",
};
const TONE: Record<string, string> = { pending: "transition", passed: "ok", failed: "bad", overridden: "idle" };

export function PreflightPanel({ experimentId }: { experimentId: number }) {
  const { can } = useSession();
  const preflight = useExperimentPreflight(experimentId);
  const override = useMutation({ mutationFn: () => overridePreflight(experimentId) });
  const data = preflight.data;
  if (!data || !data.state) return null;
  const held = data.state === "pending" || data.state === "failed";
  return (
    <section className={`card preflight ${data.state}`} data-testid="preflight-verdict" data-state={data.state}>
      <h2>Pre-flight check <span className={`badge tone-${TONE[data.state]}`}>{STATE_TEXT[data.state]}</span></h2>
      <ErrorBox error={preflight.error ?? override.error} />
      {data.runs.map((r) => (
        <div key={r.run_id} className="preflight-engine">
          <h3><BackendTag backend={r.backend as Backend} /> <span className="muted small">run #{r.run_id}, {r.state}</span></h3>
          {r.verdict ? (
            <table className="compact">
              <tbody>{r.verdict.checks.map((c) => (
                <tr key={c.name} data-testid="preflight-check" data-check={c.name} data-status={c.status}>
                  <td><span className={`badge tone-${c.status === "pass" ? "ok" : c.status === "fail" ? "bad" : "idle"}`}>{c.status}</span></td>
                  <td><code>{c.name}</code></td>
                  <td>{c.figure}{c.status !== "pass" && c.message && <div className="state-error small">{c.message}</div>}</td>
                </tr>))}</tbody>
            </table>
          ) : <p className="muted small">no verdict yet</p>}
        </div>
      ))}
      {held && can("member") && (
        <button type="button" className="btn" disabled={override.isPending} data-testid="preflight-override"
          onClick={() => { if (window.confirm("Launch the runs although the pre-flight check has not passed?")) override.mutate(); }}>
          Launch the runs anyway
        </button>
      )}
    </section>
  );
}
