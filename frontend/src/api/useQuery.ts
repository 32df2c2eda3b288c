// A small read hook with a shared cache: revisiting a page shows the last answer at once and
// refreshes it; `invalidate(prefix)` refetches every mounted query under that URL prefix
// (after a mutation). Deliberately tiny instead of a query library. The cache holds raw
// answers: two hooks may read one URL through different `select`s.
import { useCallback, useEffect, useMemo, useRef, useState, useSyncExternalStore } from "react";
import { ApiError, buildUrl, request, type Query } from "./client";

const cache = new Map<string, unknown>();
// requests started by prefetchQuery, by URL: a hook that mounts meanwhile waits for the same
// answer instead of asking again
const inflight = new Map<string, Promise<unknown>>();
// a prefetched answer is not asked for again by the first hook that reads it within this
// long (it is seconds old at most): the server is busy with the page's other reads then
const PREFETCH_FRESH_MS = 5000;
const prefetchedAt = new Map<string, number>();

/** Starts reading `path` now (at boot, before the session check answers) so the hook that
 * will ask for it finds the answer, or the request, already there. Failures are dropped:
 * the hook then asks again and reports its own error. */
export function prefetchQuery(path: string, query?: Query): void {
  const url = buildUrl(path, query);
  if (cache.has(url) || inflight.has(url)) return;
  const pending = request<unknown>(url).then((raw) => {
    cache.set(url, raw);
    prefetchedAt.set(url, Date.now());
    return raw;
  });
  inflight.set(url, pending);
  pending.catch(() => undefined).finally(() => inflight.delete(url));
}
const listeners = new Set<(url: string) => void>();
let generation = 0;
const generationListeners = new Set<() => void>();

export function invalidate(prefix: string): void {
  for (const key of [...cache.keys()]) if (key.startsWith(prefix)) cache.delete(key);
  listeners.forEach((fn) => fn(prefix));
}

/** Forget everything (logout, team switch). */
export function clearCache(): void {
  cache.clear();
  generation += 1;
  generationListeners.forEach((fn) => fn());
}

function useGeneration(): number {
  return useSyncExternalStore(
    (fn) => { generationListeners.add(fn); return () => generationListeners.delete(fn); },
    () => generation,
  );
}

export interface QueryResult<T> {
  data: T | undefined;
  error: ApiError | null;
  loading: boolean;
  reload: () => void;
}

/** GET `path` (null: do nothing). `select` maps the raw body (e.g. unwrap a page). */
export function useQuery<T, Raw = T>(
  path: string | null,
  query?: Query,
  select?: (raw: Raw) => T,
): QueryResult<T> {
  const url = path === null ? null : buildUrl(path, query);
  const gen = useGeneration();
  const [state, setState] = useState<{ url: string | null; raw: Raw | undefined;
    error: ApiError | null; loading: boolean }>(() => ({
      url, raw: url ? (cache.get(url) as Raw | undefined) : undefined, error: null, loading: !!url,
    }));
  const [tick, setTick] = useState(0);
  const selectRef = useRef(select);
  selectRef.current = select;

  useEffect(() => {
    if (!url) return;
    const onInvalidate = (prefix: string) => { if (url.startsWith(prefix)) setTick((t) => t + 1); };
    listeners.add(onInvalidate);
    return () => { listeners.delete(onInvalidate); };
  }, [url]);

  useEffect(() => {
    if (!url) {
      setState({ url, raw: undefined, error: null, loading: false });
      return;
    }
    const at = prefetchedAt.get(url);
    prefetchedAt.delete(url); // once: a reload or an invalidation asks the server again
    if (at !== undefined && Date.now() - at < PREFETCH_FRESH_MS && cache.has(url)) {
      setState({ url, raw: cache.get(url) as Raw, error: null, loading: false });
      return;
    }
    const controller = new AbortController();
    setState((s) => ({
      url, raw: s.url === url ? s.raw : (cache.get(url) as Raw | undefined), error: null, loading: true,
    }));
    const early = inflight.get(url) as Promise<Raw> | undefined;
    (early ?? request<Raw>(url, { signal: controller.signal })).then(
      (raw) => {
        if (controller.signal.aborted) return;
        cache.set(url, raw);
        setState({ url, raw, error: null, loading: false });
      },
      (err: unknown) => {
        if (controller.signal.aborted) return;
        const error = err instanceof ApiError ? err
          : new ApiError(0, "client", (err as Error).message ?? String(err));
        setState((s) => ({ ...s, url, error, loading: false }));
      },
    );
    return () => controller.abort();
  }, [url, tick, gen]);

  const reload = useCallback(() => setTick((t) => t + 1), []);
  const current = state.url === url ? state
    : { raw: url ? (cache.get(url) as Raw | undefined) : undefined, error: null, loading: !!url };
  const data = useMemo(
    () => (current.raw === undefined ? undefined
      : selectRef.current ? selectRef.current(current.raw) : (current.raw as unknown as T)),
    [current.raw]);
  return { data, error: current.error, loading: current.loading, reload };
}
