// @vitest-environment happy-dom
import { act, waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { LogLine } from "../api/liveStore";
import { fakeServer } from "../test/fakeServer";
import { renderWithClient } from "../test/render";
import { episodeView } from "./episode";
import { useOlderLogs, useSampleHistory } from "./runHistory";

afterEach(() => vi.unstubAllGlobals());

const event = (id: number) => ({ id, time: "2026-11-30T12:00:00Z", kind: "log", level: "info", message: `line ${id}`, dispatch: 1 });

describe("useOlderLogs", () => {
  it("reads nothing until asked, then the pages before the oldest line held", async () => {
    // the server holds events 1…250; the stream's snapshot the last 100
    const server = fakeServer({ "GET /api/v1/runs/7/events": (url) => {
      const before = Number(url.searchParams.get("before"));
      const ids = Array.from({ length: Math.min(100, before - 1) }, (_, i) => before - 1 - i); // newest first
      return { results: ids.map(event), last_id: 250, next_before: ids.at(-1)! > 1 ? ids.at(-1) : null };
    } });
    const streamed: LogLine[] = Array.from({ length: 100 }, (_, i) => ({ id: 151 + i, time: 0, level: "info", message: "" }));
    const { result } = renderWithClient(() => useOlderLogs(7, streamed, true));
    expect(result.current.older.more).toBe(true);
    expect(server.requests).toHaveLength(0);

    act(() => result.current.older.load());
    await waitFor(() => expect(result.current.lines).toHaveLength(200));
    expect(server.requests[0].searchParams.get("before")).toBe("151");
    expect(result.current.lines[0].id).toBe(51); // oldest first
    act(() => result.current.older.load());
    await waitFor(() => expect(result.current.lines).toHaveLength(250));
    expect(server.requests.map((u) => u.searchParams.get("before"))).toEqual(["151", "51"]);
    expect(result.current.older.more).toBe(false); // the server said there is nothing older
  });

  it("offers nothing older when the snapshot held all the lines", () => {
    fakeServer({});
    const { result } = renderWithClient(() => useOlderLogs(7, [{ id: 1, time: 0, level: "info", message: "" }], false));
    expect(result.current.older.more).toBe(false);
  });
});

describe("useSampleHistory", () => {
  it("reads the newest page once enabled, older pages on demand", async () => {
    const set = (step: number) => ({ id: step, step, dispatch: 1, items: [], created_at: "" });
    const server = fakeServer({ "GET /api/v1/runs/7/samples": (url) => (url.searchParams.has("before_step")
      ? { results: [set(10)], next_before_step: null } : { results: [set(30), set(20)], next_before_step: 20 }) });
    const { result, rerender } = renderWithClient((enabled: boolean) => useSampleHistory(7, enabled), { initialProps: false });
    expect(server.requests).toHaveLength(0);
    rerender(true);
    await waitFor(() => expect(result.current.sets.map((s) => s.step)).toEqual([30, 20]));
    expect(result.current.more).toBe(true);
    act(() => result.current.loadOlder());
    await waitFor(() => expect(result.current.sets.map((s) => s.step)).toEqual([30, 20, 10]));
    expect(server.requests[1].searchParams.get("before_step")).toBe("20");
    expect(result.current.more).toBe(false);
    rerender(false);
    rerender(true); // the tab opened again: what was read stays, nothing is asked again
    expect(server.requests).toHaveLength(2);
  });

  it("brings an episode's turns to the inspector as the job sent them", async () => {
    const turns = [
      { role: "model", text: "<tool_call>…</tool_call>", tokens: 20, masked: false, adapter_version: 2, adapter_versions: [2] },
      { role: "tool", name: "add", text: "87", tokens: 12, masked: true },
      { role: "model", text: "\\boxed{87}", tokens: 8, masked: false, adapter_version: 2, adapter_versions: [2] },
    ];
    const item = { prompt: "Add 48+39.", completion: "\\boxed{87}", reward: 1, advantage: 0.5, adapter_version: 2, turns };
    fakeServer({ "GET /api/v1/runs/7/samples": () => ({ results: [{ id: 1, step: 4, dispatch: 1, items: [item], created_at: "" }],
      next_before_step: null }) });
    const { result } = renderWithClient(() => useSampleHistory(7, true));
    await waitFor(() => expect(result.current.sets).toHaveLength(1));
    const view = episodeView(result.current.sets[0].items[0])!;
    expect(view).toMatchObject({ modelTurns: 2, trained: 28, masked: 12, maskedSpans: [[20, 32]] });
  });
});
