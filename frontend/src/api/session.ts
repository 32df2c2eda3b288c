import { queryOptions } from "@tanstack/react-query";
import { ApiError, request } from "./client";
import { queryKeys } from "./queryKeys";
import type { Session } from "./types";

// Endpoints of platform/paddock/core/session_views.py.

/** GET /session/me: who is logged in, null when nobody is (a 401 is an answer here). */
export const sessionQuery = queryOptions({
  queryKey: queryKeys.session,
  queryFn: async ({ signal }): Promise<Session | null> => {
    try {
      return await request<Session>("/api/v1/session/me", { signal });
    } catch (err) {
      if (err instanceof ApiError && err.isUnauthenticated) return null;
      throw err;
    }
  },
  staleTime: Infinity,
});

export async function ensureCsrf(): Promise<void> {
  if (!document.cookie.includes("csrftoken=")) await request("/api/v1/session/csrf");
}

export async function login(username: string, password: string): Promise<Session> {
  await ensureCsrf();
  return request<Session>("/api/v1/session/login", { method: "POST", body: { username, password } });
}

export async function logout(): Promise<void> {
  await ensureCsrf();
  await request("/api/v1/session/logout", { method: "POST" });
}
