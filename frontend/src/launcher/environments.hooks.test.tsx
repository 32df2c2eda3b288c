// @vitest-environment happy-dom
import { waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { useClusters } from "../api/clusters";
import { fakeServer } from "../test/fakeServer";
import { renderWithClient } from "../test/render";
import { offeredEnvironments } from "./environments";

afterEach(() => vi.unstubAllGlobals());

const row = (id: number, name: string, environments: string[], healthy = true) => ({
  id, name, team: 1, dashboard_url: "", labels: {}, capacity: {}, backends: ["torch"], environments, healthy,
  last_seen_at: null });

describe("the launcher's environments", () => {
  it("come from the clusters API, the healthy clusters' only", async () => {
    const server = fakeServer({ "GET /api/v1/clusters": () => [
      row(1, "local", ["calculator", "http"]), row(2, "games", ["calculator", "http", "wordle"]),
      row(3, "down", ["calculator", "http", "chess"], false)] });
    const { result } = renderWithClient(() => {
      const clusters = useClusters(1);
      const healthy = (clusters.data ?? []).filter((c) => c.healthy);
      return { any: offeredEnvironments(healthy, null), local: offeredEnvironments(healthy, healthy[0] ?? null) };
    });
    await waitFor(() => expect(result.current.any).toEqual(["calculator", "http", "wordle"]));
    expect(result.current.local).toEqual(["calculator", "http"]);
    expect(server.to("/api/v1/clusters")).toHaveLength(1);
  });
  it("are none without a team (nothing asked) or a cluster", async () => {
    const server = fakeServer({ "GET /api/v1/clusters": () => [] });
    const { result, rerender } = renderWithClient((team: number | null) => {
      const clusters = useClusters(team);
      return { loaded: clusters.isSuccess, offered: offeredEnvironments(clusters.data ?? [], null) };
    }, { initialProps: null as number | null });
    expect(result.current.offered).toEqual([]);
    expect(server.requests).toHaveLength(0);
    rerender(1);
    await waitFor(() => expect(result.current.loaded).toBe(true));
    expect(result.current.offered).toEqual([]);
  });
});
