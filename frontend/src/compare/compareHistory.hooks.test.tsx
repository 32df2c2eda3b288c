// @vitest-environment happy-dom
import { waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { newQueryClient } from "../api/queryClient";
import { useExperiment } from "../api/experiments";
import { useExperimentRuns } from "../api/runs";
import { fakeServer, held, type Held } from "../test/fakeServer";
import { renderWithClient } from "../test/render";
import { COMPARE_KEYS, FIRST_KEY, prefetchCompare, useCompareHistory, type StepWindow } from "./compareHistory";

afterEach(() => vi.unstubAllGlobals());

/** A GET /metrics answer for runs 1 and 2: the keys asked, the steps given. */
function answer(url: URL, steps: number[]) {
  const keys = url.searchParams.get("keys")!.split(",");
  return { runs: [1, 2].map((run) => ({ run, x: url.searchParams.get("x"), series: keys.map((key) => ({
    key, x: steps.map((s) => 1000 + s), y: steps.map((s) => run + s / 100), step: steps, count: steps.length,
    downsampled: false })) })) };
}

/** The stage a request is: "stride:1", "stride:<keys>", "minmax:<keys>", or "window". */
const stageOf = (u: URL) => (u.searchParams.has("x_min") ? "window"
  : `${u.searchParams.get("sample")}:${u.searchParams.get("keys")!.split(",").length}`);

describe("useCompareHistory", () => {
  it("reads the stages in order, each once the one before answered", async () => {
    const answers = new Map<string, Held>();
    const server = fakeServer({ "GET /api/v1/metrics": (url) => {
      const h = held(); answers.set(stageOf(url), h); return h;
    } });
    const { result } = renderWithClient(() => useCompareHistory({ experiment: 5 }, COMPARE_KEYS));
    await waitFor(() => expect(server.requests.map(stageOf)).toEqual(["stride:1"]));
    expect(server.requests[0].searchParams.get("keys")).toBe(FIRST_KEY);
    expect(result.current).toMatchObject({ stage: "loading", history: null, painted: false });

    answers.get("stride:1")!.release(answer(server.requests[0], [0, 50, 99]));
    await waitFor(() => expect(result.current.stage).toBe("overview"));
    expect(result.current.painted).toBe(true); // the moment the live streams may open
    expect([...result.current.history!.get(2)!.keys()]).toEqual([FIRST_KEY]);
    await waitFor(() => expect(server.requests.map(stageOf)).toEqual(["stride:1", `stride:${COMPARE_KEYS.length - 1}`]));

    answers.get(`stride:${COMPARE_KEYS.length - 1}`)!.release(answer(server.requests[1], [0, 99]));
    await waitFor(() => expect(result.current.history!.get(1)!.size).toBe(COMPARE_KEYS.length));
    expect(result.current.stage).toBe("overview");
    await waitFor(() => expect(server.requests).toHaveLength(3));
    expect(stageOf(server.requests[2])).toBe(`minmax:${COMPARE_KEYS.length}`);

    answers.get(`minmax:${COMPARE_KEYS.length}`)!.release(answer(server.requests[2], [0, 1, 50, 98, 99]));
    await waitFor(() => expect(result.current.stage).toBe("full"));
    expect(result.current.history!.get(1)!.get(FIRST_KEY)!.step).toEqual([0, 1, 50, 98, 99]); // replaced
  });

  it("finds the reads prefetched at boot instead of asking again", async () => {
    const server = fakeServer({
      "GET /api/v1/metrics": (url) => answer(url, [0, 10]),
      "GET /api/v1/experiments/5": () => ({ id: 5, name: "arith" }),
      "GET /api/v1/runs": () => ({ results: [{ id: 1 }, { id: 2 }], next: null }),
    });
    const client = newQueryClient();
    prefetchCompare(client, 5); // as App.tsx does for /experiments/5/compare, before any page renders
    expect(server.requests.map((u) => u.pathname)).toEqual(["/api/v1/metrics", "/api/v1/runs", "/api/v1/experiments/5"]);
    const { result } = renderWithClient(() => ({
      history: useCompareHistory({ experiment: 5 }, COMPARE_KEYS),
      runs: useExperimentRuns(5), experiment: useExperiment(5),
    }), { client });
    await waitFor(() => expect(result.current.history.stage).toBe("full"));
    expect(result.current.runs.data?.map((r) => r.id)).toEqual([1, 2]);
    expect(result.current.experiment.data?.name).toBe("arith");
    // each read once: the page's first stage, runs and experiment were the prefetched ones
    expect(server.to("/api/v1/metrics").map(stageOf)).toEqual(["stride:1", `stride:${COMPARE_KEYS.length - 1}`,
      `minmax:${COMPARE_KEYS.length}`]);
    expect(server.to("/api/v1/runs")).toHaveLength(1);
    expect(server.to("/api/v1/experiments/5")).toHaveLength(1);
  });

  it("splices a zoomed step window of one key into every run's history", async () => {
    const server = fakeServer({ "GET /api/v1/metrics": (url) => (url.searchParams.has("x_min")
      ? answer(url, [40, 41, 42]) : answer(url, [0, 50, 100])) });
    const { result, rerender } = renderWithClient((windows: StepWindow[]) =>
      useCompareHistory({ runs: [1, 2] }, [FIRST_KEY], windows), { initialProps: [] as StepWindow[] });
    await waitFor(() => expect(result.current.stage).toBe("full"));
    rerender([{ key: FIRST_KEY, from: 40, to: 42 }]);
    await waitFor(() => expect(result.current.history!.get(2)!.get(FIRST_KEY)!.step).toEqual([0, 40, 41, 42, 50, 100]));
    const zoom = server.requests.find((u) => u.searchParams.has("x_min"))!.searchParams;
    expect([zoom.get("runs"), zoom.get("x"), zoom.get("x_min"), zoom.get("x_max")]).toEqual(["1,2", "step", "40", "42"]);
    // a window has no times of its own: they are interpolated from the history's
    expect(result.current.history!.get(1)!.get(FIRST_KEY)!.time.slice(1, 4)).toEqual([1040, 1041, 1042]);
  });
});
