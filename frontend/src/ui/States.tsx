// Loading, empty and error states, the same everywhere.
import type { ReactNode } from "react";
import type { ApiError } from "../api/client";

export function Loading({ what = "Loading" }: { what?: string }) {
  return <div className="state-loading" role="status"><span className="spinner" />{what}…</div>;
}

export function Empty({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <div className="state-empty">
      <strong>{title}</strong>
      {children && <div>{children}</div>}
    </div>
  );
}

export function ErrorBox({ error, onRetry }: { error: ApiError | Error | null; onRetry?: () => void }) {
  if (!error) return null;
  const api = "code" in error ? (error as ApiError) : null;
  return (
    <div className="state-error" role="alert">
      <div>
        {api?.field && <code className="error-field">{api.field}</code>}
        {error.message}
        {api && api.code !== "error" && <span className="error-code">{api.code}</span>}
      </div>
      {onRetry && <button className="btn small" onClick={onRetry}>Retry</button>}
    </div>
  );
}

/** Picks one of the states for a query (a query hook's result), or renders the children
 * with its data. */
export function Query<T>({ result, children, loadingText, isEmpty, empty }: {
  result: { data: T | undefined; error: ApiError | null; refetch: () => unknown };
  children: (data: T) => ReactNode;
  loadingText?: string;
  isEmpty?: (data: T) => boolean;
  empty?: ReactNode;
}) {
  const retry = () => void result.refetch();
  if (result.data === undefined) {
    if (result.error) return <ErrorBox error={result.error} onRetry={retry} />;
    return <Loading what={loadingText} />;
  }
  if (isEmpty?.(result.data)) return <>{empty}</>;
  return (
    <>
      {result.error && <ErrorBox error={result.error} onRetry={retry} />}
      {children(result.data)}
    </>
  );
}
