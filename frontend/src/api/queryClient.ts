// The one query layer (TanStack Query): every GET of the app goes through a hook of api/
// whose key comes from queryKeys.ts, into one cache. Errors are always ApiError.
import { QueryClient } from "@tanstack/react-query";
import { ApiError } from "./client";

declare module "@tanstack/react-query" {
  interface Register {
    defaultError: ApiError;
  }
}

export function asApiError(err: unknown): ApiError {
  return err instanceof ApiError ? err : new ApiError(0, "client", (err as Error)?.message ?? String(err));
}

/** What every query does unless its hook says otherwise. */
export function newQueryClient(): QueryClient {
  return new QueryClient({
    defaultOptions: {
      queries: {
        // an answer this young is shown without asking again: a page opened at boot finds
        // the prefetched answers (main.tsx) instead of asking twice while the server is busy
        staleTime: 5_000,
        // a 4xx will not change by asking again; the live data comes over the websockets
        retry: false,
        refetchOnWindowFocus: false,
      },
    },
  });
}

/** The app's client (main.tsx provides it; mutations in api/ invalidate through it). */
export const queryClient = newQueryClient();

/** The answers of several queries (a `combine` of useQueries; being one function, it makes
 * a new array only when one of them changed). */
export function answers<T>(results: readonly { data: T | undefined }[]): (T | undefined)[] {
  return results.map((r) => r.data);
}

/** Several queries as one: `data` once every one answered, else the first error. */
export function allAnswers<T>(results: readonly { data: T | undefined; error: ApiError | null }[]):
  { data: T[] | undefined; error: ApiError | null } {
  return {
    data: results.every((r) => r.data !== undefined) ? results.map((r) => r.data as T) : undefined,
    error: results.find((r) => r.error)?.error ?? null,
  };
}
