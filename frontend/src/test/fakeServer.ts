// A stand-in for the API server in vitest (the real one cannot run here): `fetch` answered
// by handlers keyed "METHOD /path", every request recorded. A handler may return a
// `held()` answer, released by the test, to check what is asked while a read is in flight.
import { vi } from "vitest";

export type Handler = (url: URL, init: RequestInit | undefined) => unknown;

export interface Held<T = unknown> { promise: Promise<T>; release: (body: T) => void }

/** An answer the test releases when it chooses. */
export function held<T = unknown>(): Held<T> {
  let release!: (body: T) => void;
  const promise = new Promise<T>((resolve) => { release = resolve; });
  return { promise, release };
}

export interface FakeServer {
  /** every request so far, in order */
  requests: URL[];
  /** the requests to `path` (any query) */
  to: (path: string) => URL[];
}

const ORIGIN = "http://paddock.test";

/** Replaces `fetch` until the test's end (vi.unstubAllGlobals in afterEach). */
export function fakeServer(routes: Record<string, Handler>): FakeServer {
  const requests: URL[] = [];
  vi.stubGlobal("fetch", async (input: string, init?: RequestInit) => {
    const url = new URL(input, ORIGIN);
    requests.push(url);
    const handler = routes[`${init?.method ?? "GET"} ${url.pathname}`];
    if (!handler) return json({ code: "not_found", message: `no route ${url.pathname}`, field: null }, 404);
    let body = handler(url, init);
    if (body && typeof body === "object" && "promise" in body) body = await (body as Held).promise;
    return body instanceof Response ? body : json(body);
  });
  return { requests, to: (path) => requests.filter((u) => u.pathname === path) };
}

export function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}
