import { useState } from "react";
import { ApiError } from "../api/client";
import { controlRun } from "../api/runs";
import type { RunAction, RunState } from "../api/types";
import { useSession } from "../session/SessionContext";
import { ErrorBox } from "../ui/States";
import { actionAllowed } from "./states";

const LABEL: Record<RunAction, string> = { pause: "Pause", resume: "Resume", abort: "Abort" };

/** Pause / resume / abort, enabled only where the state machine allows. Sent over the run's
 * websocket when it is open (the answer arrives as a `state` message), else over REST. */
export function RunControls({ runId, state, desired, send, streamError }: {
  runId: number; state: RunState; desired: string;
  send: (action: RunAction) => boolean;
  streamError: { code: string; message: string } | null;
}) {
  const { can } = useSession();
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState<RunAction | null>(null);
  if (!can("member")) return <span className="muted small">viewers cannot control runs</span>;

  async function act(action: RunAction) {
    if (action === "abort" && !window.confirm(`Abort run #${runId}? It stops at once; the last checkpoint stays.`)) return;
    setError(null);
    if (send(action)) return;
    setBusy(action);
    try {
      await controlRun(runId, action);
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
    } finally {
      setBusy(null);
    }
  }

  return (
    <div className="run-controls">
      {(["pause", "resume", "abort"] as RunAction[]).map((action) => (
        <button key={action} className={`btn ${action === "abort" ? "danger" : ""}`}
          disabled={!actionAllowed(action, state, desired) || busy !== null}
          onClick={() => void act(action)} data-testid={`run-${action}`}>
          {busy === action ? `${LABEL[action]}…` : LABEL[action]}
        </button>
      ))}
      {streamError && <ErrorBox error={new ApiError(0, streamError.code, streamError.message)} />}
      <ErrorBox error={error} />
    </div>
  );
}
