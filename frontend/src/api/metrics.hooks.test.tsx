// @vitest-environment happy-dom
import { waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it } from "vitest";
import { vi } from "vitest";
import { fakeServer, held, type Held } from "../test/fakeServer";
import { renderWithClient } from "../test/render";
import { useMultiMetrics, useRunMetrics, useRunWindows, type RunWindow } from "./metrics";

afterEach(() => vi.unstubAllGlobals());

/** A GET /runs/{id}/metrics answer: one key, the steps given, value = step / 10. */
function body(steps: number[], key = "reward/mean") {
  return { run: 1, x: "time", series: [{ key, x: steps.map((s) => 1000 + s), y: steps.map((s) => s / 10),
    step: steps, count: steps.length, downsampled: false }] };
}

describe("useRunMetrics", () => {
  it("reads the stride overview first, then the min/max read in its place", async () => {
    const answers: Record<string, Held> = { stride: held(), minmax: held() };
    const server = fakeServer({ "GET /api/v1/runs/1/metrics": (url) => answers[url.searchParams.get("sample")!] });
    const { result } = renderWithClient(() => useRunMetrics(1));
    await waitFor(() => expect(server.requests).toHaveLength(1));
    expect(server.requests[0].searchParams.get("sample")).toBe("stride");
    expect(result.current.history).toBeNull();

    answers.stride.release(body([0, 50, 99]));
    await waitFor(() => expect(result.current.history?.get("reward/mean")?.step).toEqual([0, 50, 99]));
    // the full read goes out only once the overview answered
    await waitFor(() => expect(server.requests).toHaveLength(2));
    expect(server.requests[1].searchParams.get("sample")).toBe("minmax");
    expect(server.requests[1].searchParams.get("max_points")).toBe("2000");

    answers.minmax.release(body([0, 10, 50, 51, 99]));
    await waitFor(() => expect(result.current.history?.get("reward/mean")?.step).toEqual([0, 10, 50, 51, 99]));
    expect(result.current.error).toBeNull();
  });

  it("answers from the cache when the page is opened again", async () => {
    const server = fakeServer({ "GET /api/v1/runs/1/metrics": () => body([1, 2]) });
    const first = renderWithClient(() => useRunMetrics(1));
    await waitFor(() => expect(server.requests).toHaveLength(2));
    first.unmount();
    const again = renderWithClient(() => useRunMetrics(1), { client: first.client });
    expect(again.result.current.history?.get("reward/mean")?.step).toEqual([1, 2]); // at once
    expect(server.requests).toHaveLength(2); // young answers are not asked for again
  });

  it("reports a failed read with the server's error and an empty history", async () => {
    fakeServer({ "GET /api/v1/runs/1/metrics": () => new Response(JSON.stringify(
      { code: "forbidden", message: "not your run", field: null }), { status: 403, headers: { "content-type": "application/json" } }) });
    const { result } = renderWithClient(() => useRunMetrics(1));
    await waitFor(() => expect(result.current.error?.code).toBe("forbidden"));
    expect(result.current.history?.size).toBe(0);
  });
});

describe("useRunWindows", () => {
  it("reads each zoomed window at full resolution and splices it into the history", async () => {
    const server = fakeServer({ "GET /api/v1/runs/1/metrics": () => body([40, 41, 42, 43]) });
    const history = new Map([["reward/mean", { step: [0, 50, 100], value: [0, 5, 10], time: [1000, 1050, 1100] }]]);
    const window: RunWindow = { keys: ["reward/mean"], from: 1040, to: 1043 };
    const { result, rerender } = renderWithClient((windows: RunWindow[]) => useRunWindows(1, history, windows),
      { initialProps: [] as RunWindow[] });
    expect(result.current).toBe(history); // nothing zoomed: nothing read
    expect(server.requests).toHaveLength(0);

    rerender([window]);
    await waitFor(() => expect(result.current?.get("reward/mean")?.step).toEqual([0, 40, 41, 42, 43, 50, 100]));
    const asked = server.requests[0].searchParams;
    expect([asked.get("keys"), asked.get("x_min"), asked.get("x_max"), asked.get("max_points")])
      .toEqual(["reward/mean", "1040", "1043", "1000"]);
    expect(history.get("reward/mean")!.step).toEqual([0, 50, 100]); // the input is kept

    rerender([{ ...window }]); // the same window again: the cached answer
    expect(server.requests).toHaveLength(1);
  });
});

describe("useMultiMetrics", () => {
  it("reads a long list of runs 20 a request and keeps the last answer while the list changes", async () => {
    const runs = (ids: string) => ({ runs: ids.split(",").map(Number).map((run) => ({ ...body([run]), run })) });
    const next = held();
    let calls = 0;
    const server = fakeServer({ "GET /api/v1/metrics": (url) => (++calls > 2 ? next : runs(url.searchParams.get("runs")!)) });
    const ids = Array.from({ length: 25 }, (_, i) => i + 1);
    const read = { keys: ["reward/mean"], maxPoints: 100, sample: "stride" } as const;
    const { result, rerender } = renderWithClient((list: number[]) => useMultiMetrics(list, read), { initialProps: ids });
    await waitFor(() => expect(result.current.size).toBe(25));
    expect(server.requests.map((u) => u.searchParams.get("runs")!.split(",").length)).toEqual([20, 5]);

    rerender([...ids, 26]); // two requests again (20 + 6), both held
    await waitFor(() => expect(server.requests).toHaveLength(4));
    expect(result.current.size).toBe(25); // drawn meanwhile
    next.release(runs("26"));
    await waitFor(() => expect([...result.current.keys()]).toEqual([26]));
  });
});
