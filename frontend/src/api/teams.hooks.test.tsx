// @vitest-environment happy-dom
import { act, waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { fakeServer, json } from "../test/fakeServer";
import { renderWithClient } from "../test/render";
import { useAudit, useDeleteSecret, useSecrets, useSetSecret } from "./teams";
import type { TeamSecret } from "./types";

afterEach(() => vi.unstubAllGlobals());

const VALUE = "sk-live-0123456789abcdefWXYZ";
const row = (name: string, masked = "••••WXYZ"): TeamSecret => ({
  name, masked, updated_by: { id: 1, username: "ada" }, created_at: "2025-01-01T00:00:00Z",
  updated_at: "2025-01-02T00:00:00Z" });

/** The secrets of team 1, kept by the fake server as the real one would: masked rows. */
function secretsServer() {
  const rows = new Map<string, TeamSecret>([["OLD", row("OLD", "••••")]]);
  const sent: unknown[] = [];
  const server = fakeServer({
    "GET /api/v1/teams/1/secrets": () => [...rows.values()],
    "GET /api/v1/teams/1/audit": () => ({ results: [], next: null }),
    "PUT /api/v1/teams/1/secrets/REWARD_TOKEN": (_url, init) => {
      sent.push(JSON.parse(String(init?.body)));
      rows.set("REWARD_TOKEN", row("REWARD_TOKEN"));
      return json(row("REWARD_TOKEN"), 201);
    },
    "PUT /api/v1/teams/1/secrets/1bad": () => json(
      { code: "invalid", message: "a letter, then letters, digits, _ or -, at most 64 characters", field: "name" }, 400),
    "DELETE /api/v1/teams/1/secrets/OLD": () => { rows.delete("OLD"); return new Response(null, { status: 204 }); },
  });
  return { server, sent };
}

describe("a team's secrets", () => {
  it("are set write-only: the value is sent once, the list and the audit log read again, and no answer or cache holds it", async () => {
    const { server, sent } = secretsServer();
    const { result, client } = renderWithClient(() => ({ list: useSecrets(1), audit: useAudit(1), set: useSetSecret(1) }));
    await waitFor(() => expect(result.current.list.data?.map((s) => s.name)).toEqual(["OLD"]));
    await waitFor(() => expect(result.current.audit.isSuccess).toBe(true));

    let answer: TeamSecret | undefined;
    await act(async () => { answer = await result.current.set.mutateAsync({ name: "REWARD_TOKEN", value: VALUE }); });
    expect(sent).toEqual([{ value: VALUE }]);
    expect(answer).toEqual(row("REWARD_TOKEN"));
    // the mutation waits for the re-read: the new row is there when it resolves
    expect(result.current.list.data?.map((s) => s.name)).toEqual(["OLD", "REWARD_TOKEN"]);
    expect(server.to("/api/v1/teams/1/secrets")).toHaveLength(2);
    expect(server.to("/api/v1/teams/1/audit")).toHaveLength(2);

    // once the page resets the mutation (as it does after a set), nothing in the cache
    // still holds the value (gcTime 0)
    act(() => result.current.set.reset());
    await waitFor(() => expect(client.getMutationCache().getAll()).toHaveLength(0));
    expect(JSON.stringify(client.getQueryCache().getAll().map((q) => q.state.data))).not.toContain(VALUE);
  });

  it("carry the server's refusal with its field, and change nothing", async () => {
    const { server } = secretsServer();
    const { result } = renderWithClient(() => ({ list: useSecrets(1), set: useSetSecret(1) }));
    await waitFor(() => expect(result.current.list.isSuccess).toBe(true));
    act(() => result.current.set.mutate({ name: "1bad", value: "x" }));
    await waitFor(() => expect(result.current.set.error).not.toBeNull());
    expect(result.current.set.error).toMatchObject({ status: 400, code: "invalid", field: "name" });
    expect(result.current.set.error?.fields).toEqual({ name: "a letter, then letters, digits, _ or -, at most 64 characters" });
    expect(server.to("/api/v1/teams/1/secrets")).toHaveLength(1);
  });

  it("are deleted by name, and the list read again", async () => {
    const { server } = secretsServer();
    const { result } = renderWithClient(() => ({ list: useSecrets(1), remove: useDeleteSecret(1) }));
    await waitFor(() => expect(result.current.list.data).toHaveLength(1));
    await act(() => result.current.remove.mutateAsync("OLD"));
    expect(server.requests.filter((u) => u.pathname === "/api/v1/teams/1/secrets/OLD")).toHaveLength(1);
    await waitFor(() => expect(result.current.list.data).toEqual([]));
    expect(server.to("/api/v1/teams/1/secrets")).toHaveLength(2);
  });
});
