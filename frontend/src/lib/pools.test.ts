import { describe, expect, it } from "vitest";
import type { PoolMember, RunPool } from "../api/types";
import { memoryFigures, membersInOrder, poolTeamLabel, runPoolLine, shareLabel } from "./pools";

const pool: RunPool = {
  id: 3, name: "sweep", state: "running", share: 0.25, weight: 1, joined_at: "2026-01-01T00:00:00Z",
  left_at: null, members_of_your_team: [7], members_total: 4,
};

function member(run: number, share: number | null, left_at: string | null = null): PoolMember {
  return { run, experiment_name: "e", team: 1, team_name: "t", state: "running", dispatch: 1, weight: 1,
    share, gpus: null, joined_at: "2026-01-01T00:00:00Z", left_at, left_reason: "", latest: {} };
}

describe("pool views", () => {
  it("shows a share as a percentage", () => {
    expect(shareLabel(0.5)).toBe("50 %");
    expect(shareLabel(1 / 3)).toBe("33 %");
    expect(shareLabel(0.05)).toBe("5.0 %");
    expect(shareLabel(null)).toBe("—");
  });

  it("says the run's pool, its share, and only counts the other teams' runs", () => {
    expect(runPoolLine(pool)).toBe("pool sweep · share 25 % · 1 of your team's runs, 4 in all");
    expect(runPoolLine({ ...pool, left_at: "2026-01-02T00:00:00Z", share: null })).toContain("· left ·");
  });

  it("names the pool's team for staff only (the API sends it to staff alone)", () => {
    expect(poolTeamLabel({ team: 4, team_name: "vision" })).toBe("vision");
    expect(poolTeamLabel({ team: null, team_name: null })).toBe("auto: no team");
    expect(poolTeamLabel({})).toBeNull();
  });

  it("reads the memory figures a pool job reports", () => {
    expect(memoryFigures({ "memory/gpu_gb": 12, "throughput/tokens_per_s": 9, "memory/cpu_gb": 3 }))
      .toEqual([["cpu_gb", 3], ["gpu_gb", 12]]);
  });

  it("puts current members first, largest share first, then those that left", () => {
    const order = membersInOrder([member(1, null, "2026-01-01T01:00:00Z"), member(2, 0.25), member(3, 0.75),
      member(4, null, "2026-01-01T02:00:00Z")]).map((m) => m.run);
    expect(order).toEqual([3, 2, 4, 1]);
  });
});
