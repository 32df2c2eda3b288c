import { describe, expect, it } from "vitest";
import { actionAllowed } from "./states";

describe("actionAllowed", () => {
  it("follows the run state machine", () => {
    expect(actionAllowed("pause", "running", "running")).toBe(true);
    expect(actionAllowed("pause", "paused", "paused")).toBe(false);
    expect(actionAllowed("resume", "paused", "paused")).toBe(true);
    expect(actionAllowed("resume", "running", "running")).toBe(false);
    expect(actionAllowed("abort", "queued", "running")).toBe(true);
    expect(actionAllowed("abort", "succeeded", "running")).toBe(false);
    expect(actionAllowed("abort", "aborting", "aborted")).toBe(false);
  });
  it("does not offer what was already asked for", () => {
    expect(actionAllowed("pause", "running", "paused")).toBe(false);
  });
});
