import { QueryClientProvider } from "@tanstack/react-query";
import { Suspense, type ComponentType, type ReactNode } from "react";
import { BrowserRouter, matchPath, Navigate, Route, Routes, useLocation } from "react-router";
import { queryClient } from "./api/queryClient";
import { SessionProvider, useSession } from "./session/SessionContext";
import { LoginPage } from "./session/LoginPage";
import { Layout } from "./ui/Layout";
import { preloadable } from "./lib/preloadable";
import { ErrorBox, Loading } from "./ui/States";
import { RunsPage } from "./experiments/RunsPage";
import { prefetchCompare } from "./compare/compareHistory";

// The run list is the landing page and ships in the main chunk; the others load on demand.
const run = preloadable(() => import("./runs/RunPage"));
const launch = preloadable(() => import("./launcher/LauncherPage"));
const compare = preloadable(() => import("./compare/ComparePage"));
const team = preloadable(() => import("./teams/TeamAdminPage"));
const pool = preloadable(() => import("./pools/PoolPage"));
const sweep = preloadable(() => import("./sweeps/SweepPage"));

/** The pages behind the session, by path: the routes, and what to start at boot for the
 * URL the app was opened on (the page's code, and for a compare page its first reads). */
const PAGES: { path: string; page: ReturnType<typeof preloadable<object>> | null;
  prefetch?: (params: Record<string, string | undefined>) => void }[] = [
  { path: "/", page: null },
  { path: "/runs/:runId", page: run },
  { path: "/launch", page: launch },
  { path: "/experiments/:experimentId/compare", page: compare,
    prefetch: (p) => prefetchCompare(queryClient, Number(p.experimentId)) },
  { path: "/compare", page: compare },
  { path: "/team", page: team },
  { path: "/pools", page: pool },
  { path: "/pools/:poolId", page: pool },
  { path: "/sweeps", page: sweep },
  { path: "/sweeps/:sweepId", page: sweep },
];

// the page of the URL the app was opened on loads beside the session check, not after it
for (const { path, page, prefetch } of PAGES) {
  const match = matchPath(path, window.location.pathname);
  if (!match) continue;
  void page?.preload();
  prefetch?.(match.params);
}

function RequireSession({ children }: { children: ReactNode }) {
  const { session, loading, error, refresh } = useSession();
  const location = useLocation();
  if (loading) return <Loading what="Paddock" />;
  if (error) return <main className="content"><ErrorBox error={error} onRetry={refresh} /></main>;
  if (!session) return <Navigate to="/login" replace state={{ from: location.pathname + location.search }} />;
  return <>{children}</>;
}

export function App() {
  return (
    <QueryClientProvider client={queryClient}>
      <SessionProvider>
        <BrowserRouter>
          <Suspense fallback={<Loading />}>
            <Routes>
              <Route path="/login" element={<LoginPage />} />
              <Route element={<RequireSession><Layout /></RequireSession>}>
                {PAGES.map(({ path, page }) => {
                  const Page: ComponentType = page ? page.Component : RunsPage;
                  return path === "/" ? <Route key={path} index element={<Page />} />
                    : <Route key={path} path={path.slice(1)} element={<Page />} />;
                })}
                <Route path="*" element={<ErrorBox error={new Error("No such page.")} />} />
              </Route>
            </Routes>
          </Suspense>
        </BrowserRouter>
      </SessionProvider>
    </QueryClientProvider>
  );
}
