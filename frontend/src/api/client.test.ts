import { describe, expect, it } from "vitest";
import { buildUrl, errorFromBody, listOf } from "./client";

describe("errorFromBody", () => {
  it("reads the API's one shape, with every field error of a spec", () => {
    const e = errorFromBody(400, {
      code: "spec_invalid", message: "spec.algorithm.clip_eps_low: must be > 0", field: "spec.algorithm.clip_eps_low",
      errors: [{ field: "spec.algorithm.clip_eps_low", message: "must be > 0" }, { field: "spec.train.steps", message: "must be > 0" }],
    });
    expect([e.status, e.code, e.field]).toEqual([400, "spec_invalid", "spec.algorithm.clip_eps_low"]);
    expect(e.fields).toEqual({ "spec.algorithm.clip_eps_low": "must be > 0", "spec.train.steps": "must be > 0" });
  });

  it("reads DRF's defaults and plain text", () => {
    expect(errorFromBody(401, { detail: "Authentication credentials were not provided." }).isUnauthenticated).toBe(true);
    const e = errorFromBody(400, { name: ["This field is required."] });
    expect([e.code, e.field, e.message]).toEqual(["invalid", "name", "name: This field is required."]);
    expect(errorFromBody(502, "Bad gateway").code).toBe("server_error");
  });
});

describe("buildUrl / listOf", () => {
  it("skips empty parameters and joins lists", () => {
    expect(buildUrl("/api/v1/runs", { team: 1, state: "", tag: undefined, keys: ["a/b", "c"] }))
      .toBe("/api/v1/runs?team=1&keys=a%2Fb%2Cc");
    expect(buildUrl("http://h/api/v1/runs?cursor=x")).toBe("http://h/api/v1/runs?cursor=x");
  });
  it("unwraps pages", () => {
    expect(listOf([1])).toEqual([1]);
    expect(listOf({ results: [2], next: null })).toEqual([2]);
  });
});
