import { afterEach, describe, expect, it, vi } from "vitest";
import { fakeServer, json } from "../test/fakeServer";
import { newQueryClient } from "./queryClient";
import { sessionQuery } from "./session";

afterEach(() => vi.unstubAllGlobals());

describe("sessionQuery", () => {
  it("answers who is logged in, null for nobody, and fails on anything else", async () => {
    const me = { user: { id: 1, username: "ada" }, teams: [] };
    let status = 200;
    fakeServer({ "GET /api/v1/session/me": () => (status === 200 ? me
      : json({ code: status === 401 ? "not_authenticated" : "server_error", message: "m", field: null }, status)) });
    vi.stubGlobal("window", { dispatchEvent: () => true }); // request() announces a 401
    expect(await newQueryClient().fetchQuery(sessionQuery)).toEqual(me);
    status = 401;
    expect(await newQueryClient().fetchQuery(sessionQuery)).toBeNull();
    status = 500;
    await expect(newQueryClient().fetchQuery(sessionQuery)).rejects.toMatchObject({ code: "server_error" });
  });
});
