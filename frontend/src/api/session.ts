import { request } from "./client";
import { clearCache } from "./useQuery";
import type { Session } from "./types";

// Endpoints of platform/paddock/core/session_views.py.

export function fetchSession(): Promise<Session> {
  return request<Session>("/api/v1/session/me");
}

export async function ensureCsrf(): Promise<void> {
  if (!document.cookie.includes("csrftoken=")) await request("/api/v1/session/csrf");
}

export async function login(username: string, password: string): Promise<Session> {
  await ensureCsrf();
  clearCache();
  return request<Session>("/api/v1/session/login", { method: "POST", body: { username, password } });
}

export async function logout(): Promise<void> {
  await ensureCsrf();
  await request("/api/v1/session/logout", { method: "POST" });
  clearCache();
}
