// @vitest-environment happy-dom
import { waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { useConfigDiffs } from "../api/experiments";
import type { ConfigDiff } from "../api/types";
import { fakeServer } from "../test/fakeServer";
import { renderWithClient } from "../test/render";
import { diffColumns } from "./configColumns";

afterEach(() => vi.unstubAllGlobals());

// configs 1 (torch, seed 0), 2 (vllm, seed 0), 3 (torch, seed 1, a key of its own)
const diffs: ConfigDiff[] = [
  { a: 1, b: 2, changes: [{ path: "rollout.backend", a: "torch", b: "vllm" }] },
  { a: 1, b: 3, changes: [{ path: "seed", a: 0, b: 1 }, { path: "train.extra", a: null, b: true, only_in: "b" }] },
];

describe("diffColumns", () => {
  it("gives every column its value of every path that differs anywhere", () => {
    // columns: runs on configs 1, 2, 3 and 1 again
    expect(diffColumns(1, [1, 2, 3, 1], diffs)).toEqual([
      { path: "rollout.backend", values: ["torch", "vllm", "torch", "torch"] },
      { path: "seed", values: [0, 0, 1, 0] },
      { path: "train.extra", values: [undefined, undefined, true, undefined] },
    ]);
  });

  it("leaves a key the column lacks undefined", () => {
    expect(diffColumns(1, [1, 2], [{ a: 1, b: 2, changes: [{ path: "x", a: 3, b: null, only_in: "a" }] }]))
      .toEqual([{ path: "x", values: [3, undefined] }]);
  });

  it("has no rows when the columns share one config", () => {
    expect(diffColumns(4, [4, 4], [])).toEqual([]);
  });
});

describe("useConfigDiffs", () => {
  it("asks GET /configs/diff for the base against each other config, one answer", async () => {
    const server = fakeServer({ "GET /api/v1/configs/diff": (url) =>
      diffs.find((d) => String(d.b) === url.searchParams.get("b")) });
    const { result } = renderWithClient(() => useConfigDiffs(1, [2, 3]));
    await waitFor(() => expect(result.current.data).toEqual(diffs));
    expect(server.requests.map((u) => u.search).sort()).toEqual(["?a=1&b=2", "?a=1&b=3"]);
    expect(result.current.error).toBeNull();
  });
});
