// The thin typed client: every call goes through `request`, every failure becomes an ApiError
// carrying the server's {"code", "message", "field"} (DESIGN: one domain error shape).

export const API_ROOT = "/api/v1";

export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly field: string | null;
  /** Every field error of a validation failure, `a.b.c` → message (may be empty). */
  readonly fields: Record<string, string>;

  constructor(status: number, code: string, message: string, field: string | null = null,
              fields: Record<string, string> = {}) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.field = field;
    this.fields = fields;
  }

  get isUnauthenticated(): boolean {
    return this.status === 401 || this.code === "not_authenticated";
  }
}

export type Query = Record<string, string | number | boolean | null | undefined | string[]>;

export function buildUrl(path: string, query?: Query): string {
  // absolute URLs too: a page's `next` link comes that way
  const url = path.startsWith("/") || /^https?:/.test(path) ? path : `${API_ROOT}/${path}`;
  if (!query) return url;
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value === undefined || value === null || value === "") continue;
    if (Array.isArray(value)) {
      if (value.length) params.set(key, value.join(","));
    } else {
      params.set(key, String(value));
    }
  }
  const qs = params.toString();
  return qs ? `${url}?${qs}` : url;
}

function csrfToken(): string | null {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return match ? decodeURIComponent(match[1]) : null;
}

/** Turns any error body into one ApiError: our {"code","message","field"} shape first, then
 * DRF's defaults ({"detail"} and {"field": ["msg"]}), then plain text. */
export function errorFromBody(status: number, body: unknown): ApiError {
  if (body && typeof body === "object" && !Array.isArray(body)) {
    const b = body as Record<string, unknown>;
    const fields: Record<string, string> = {};
    if (b.errors && Array.isArray(b.errors)) {
      for (const e of b.errors as { field?: string; message?: string }[]) {
        if (e.field) fields[e.field] = e.message ?? "";
      }
    }
    if (typeof b.message === "string") {
      const field = typeof b.field === "string" && b.field ? b.field : null;
      if (field && !(field in fields)) fields[field] = b.message;
      return new ApiError(status, String(b.code ?? "error"), b.message, field, fields);
    }
    if (typeof b.detail === "string") {
      return new ApiError(status, String(b.code ?? defaultCode(status)), b.detail);
    }
    for (const [key, value] of Object.entries(b)) {
      const msg = Array.isArray(value) ? value.map(String).join(" ") : String(value);
      fields[key] = msg;
    }
    const [first] = Object.entries(fields);
    if (first) {
      return new ApiError(status, "invalid", `${first[0]}: ${first[1]}`, first[0], fields);
    }
  }
  return new ApiError(status, defaultCode(status), typeof body === "string" && body
    ? body.slice(0, 300) : `HTTP ${status}`);
}

function defaultCode(status: number): string {
  if (status === 401) return "not_authenticated";
  if (status === 403) return "forbidden";
  if (status === 404) return "not_found";
  if (status >= 500) return "server_error";
  return "error";
}

export interface RequestOptions {
  method?: "GET" | "POST" | "PATCH" | "PUT" | "DELETE";
  query?: Query;
  body?: unknown;
  signal?: AbortSignal;
}

export async function request<T>(path: string, options: RequestOptions = {}): Promise<T> {
  const method = options.method ?? "GET";
  const headers: Record<string, string> = { Accept: "application/json" };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET") {
    const token = csrfToken();
    if (token) headers["X-CSRFToken"] = token;
  }
  let response: Response;
  try {
    response = await fetch(buildUrl(path, options.query), {
      method,
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      credentials: "same-origin",
      signal: options.signal,
    });
  } catch (err) {
    if ((err as Error).name === "AbortError") throw err;
    throw new ApiError(0, "network", "The server cannot be reached. Is `paddock up` running?");
  }
  if (response.status === 204) return undefined as T;
  const text = await response.text();
  let body: unknown = text;
  if (text && (response.headers.get("content-type") ?? "").includes("json")) {
    body = JSON.parse(text);
  }
  if (!response.ok) {
    const error = errorFromBody(response.status, body);
    if (error.isUnauthenticated) window.dispatchEvent(new CustomEvent("paddock:unauthenticated"));
    throw error;
  }
  return body as T;
}

/** A list answer, bare or a page (`{"results", "next"}`, cursor pagination). */
export type ListBody<T> = T[] | { results: T[]; next?: string | null };

export function listOf<T>(body: ListBody<T>): T[] {
  return Array.isArray(body) ? body : body.results;
}
