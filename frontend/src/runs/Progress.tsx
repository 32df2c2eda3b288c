import { eta, formatDuration } from "../lib/format";
import type { RunState } from "../api/types";

/** Progress with the time left while running: from the recent pace when the caller knows
 * it (`secondsLeft`), else from elapsed time per step since the start. */
export function Progress({ step, total, startedAt, state, secondsLeft }: {
  step: number; total: number; startedAt?: string | null; state: RunState; secondsLeft?: number | null;
}) {
  const fraction = total > 0 ? Math.min(1, step / total) : 0;
  const remaining = state === "running" ? secondsLeft ?? eta(startedAt, step, total) : null;
  return (
    <div className="progress" title={`step ${step} of ${total || "?"}`}>
      <div className="progress-track"><div className="progress-fill" style={{ width: `${fraction * 100}%` }} /></div>
      <span className="progress-text">
        {step}/{total || "?"}
        {remaining !== null && <span className="muted"> · {formatDuration(remaining)} left</span>}
      </span>
    </div>
  );
}
