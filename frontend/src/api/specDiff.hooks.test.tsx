// @vitest-environment happy-dom
import { waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { fakeServer, held, json, type Held } from "../test/fakeServer";
import { renderWithClient } from "../test/render";
import { useSpecDiff } from "./experiments";
import type { SpecDiffRequest } from "./types";

afterEach(() => vi.unstubAllGlobals());

const DIFF = "/api/v1/configs/diff";
const steps = (n: number) => ({ a: 8, b: null, changes: [{ path: "train.steps", a: 40, b: n }] });

describe("useSpecDiff", () => {
  it("asks the server for the diff of a spec against a version, once per body, nothing for null", async () => {
    const bodies: unknown[] = [];
    const server = fakeServer({ [`POST ${DIFF}`]: (_url, init) => {
      const body = JSON.parse(String(init?.body));
      bodies.push(body);
      return steps(body.b_spec.train.steps);
    } });
    const { result, rerender } = renderWithClient((body: SpecDiffRequest | null) => useSpecDiff(body),
      { initialProps: null as SpecDiffRequest | null });
    expect(result.current.fetchStatus).toBe("idle");
    expect(server.requests).toHaveLength(0);

    const body = { a: 8, b_spec: { train: { steps: 60 } } };
    rerender(body);
    await waitFor(() => expect(result.current.data).toEqual(steps(60)));
    rerender({ a: 8, b_spec: { train: { steps: 60 } } });  // the same body, a new object
    expect(result.current.data).toEqual(steps(60));
    expect(bodies).toEqual([body]);
    expect(server.to(DIFF)).toHaveLength(1);
  });

  it("keeps the last answer, marked a placeholder, while a new spec is asked", async () => {
    let next: Held | null = null;
    fakeServer({ [`POST ${DIFF}`]: (_url, init) => {
      const n = JSON.parse(String(init?.body)).b_spec.train.steps;
      if (n === 60) return steps(60);
      next = held();
      return next;
    } });
    const { result, rerender } = renderWithClient((body: SpecDiffRequest) => useSpecDiff(body),
      { initialProps: { a: 8, b_spec: { train: { steps: 60 } } } });
    await waitFor(() => expect(result.current.data).toEqual(steps(60)));
    rerender({ a: 8, b_spec: { train: { steps: 70 } } });
    await waitFor(() => expect(next).not.toBeNull());
    expect(result.current.isPlaceholderData).toBe(true);
    expect(result.current.data).toEqual(steps(60));
    next!.release(steps(70));
    await waitFor(() => expect(result.current.isPlaceholderData).toBe(false));
    expect(result.current.data).toEqual(steps(70));
  });

  it("carries the server's refusal of a spec with every field it names", async () => {
    fakeServer({ [`POST ${DIFF}`]: () => json({ code: "spec_invalid", message: "b_spec.train.steps: must be >= 1",
      field: "b_spec.train.steps", errors: [{ field: "b_spec.train.steps", message: "must be >= 1" },
        { field: "b_spec.lora.r", message: "must be <= 1024" }] }, 400) });
    const { result } = renderWithClient(() => useSpecDiff({ a: 8, b_spec: { train: { steps: 0 } } }));
    await waitFor(() => expect(result.current.error).not.toBeNull());
    expect(result.current.error).toMatchObject({ status: 400, code: "spec_invalid", field: "b_spec.train.steps" });
    expect(result.current.error?.fields).toEqual({ "b_spec.train.steps": "must be >= 1", "b_spec.lora.r": "must be <= 1024" });
    expect(result.current.data).toBeUndefined();
  });
});
