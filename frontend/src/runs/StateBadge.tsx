import type { RunState } from "../api/types";
import { stateTone, TERMINAL } from "./states";

// Which desired state a state is already heading to: a badge shows "running → paused" only
// while the job has not yet acknowledged what was asked.
const HEADING: Partial<Record<RunState, string>> = {
  queued: "running", dispatching: "running", starting: "running", running: "running",
  resuming: "running", pausing: "paused", paused: "paused", aborting: "aborted", aborted: "aborted",
};

export function StateBadge({ state, desired }: { state: RunState; desired?: string }) {
  const pending = !!desired && !TERMINAL.has(state) && HEADING[state] !== desired;
  return (
    <span className={`badge tone-${stateTone(state)}`} data-testid="state-badge" data-state={state}
      title={pending ? `asked: ${desired}` : undefined}>
      {state}{pending ? ` → ${desired}` : ""}
    </span>
  );
}

export function BackendTag({ backend }: { backend: string }) {
  return <span className={`backend backend-${backend}`}>{backend}</span>;
}
