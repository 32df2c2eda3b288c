// What the run state machine (platform/paddock/experiments/states.py) allows a user to ask
// for, so buttons are enabled exactly where the server would accept them.
import { TERMINAL_RUN_STATES, type RunAction, type RunState } from "../api/types";

export const TERMINAL: ReadonlySet<RunState> = new Set(TERMINAL_RUN_STATES);

const PAUSABLE: ReadonlySet<RunState> = new Set(["running"]);
const RESUMABLE: ReadonlySet<RunState> = new Set(["paused"]);

export function actionAllowed(action: RunAction, state: RunState, desired?: string): boolean {
  switch (action) {
    case "pause": return PAUSABLE.has(state) && desired !== "paused";
    case "resume": return RESUMABLE.has(state) && desired !== "running";
    case "abort": return !TERMINAL.has(state) && state !== "aborting" && desired !== "aborted";
  }
}

export type StateTone = "active" | "transition" | "paused" | "ok" | "bad" | "idle";

export function stateTone(state: RunState): StateTone {
  switch (state) {
    case "running": return "active";
    case "dispatching": case "starting": case "pausing": case "resuming": case "aborting": return "transition";
    case "paused": return "paused";
    case "succeeded": return "ok";
    case "failed": case "aborted": return "bad";
    default: return "idle";
  }
}
