import { Suspense, type ReactNode } from "react";
import { BrowserRouter, Navigate, Route, Routes, useLocation } from "react-router";
import { SessionProvider, useSession } from "./session/SessionContext";
import { LoginPage } from "./session/LoginPage";
import { Layout } from "./ui/Layout";
import { preloadable } from "./lib/preloadable";
import { ErrorBox, Loading } from "./ui/States";
import { RunsPage } from "./experiments/RunsPage";
import { prefetchCompareHistory } from "./compare/compareHistory";

// The run list is the landing page and ships in the main chunk; the others load on demand.
const pages = {
  run: preloadable(() => import("./runs/RunPage")),
  launch: preloadable(() => import("./launcher/LauncherPage")),
  compare: preloadable(() => import("./compare/ComparePage")),
  team: preloadable(() => import("./teams/TeamAdminPage")),
  pool: preloadable(() => import("./pools/PoolPage")),
};
const RunPage = pages.run.Component;
const LauncherPage = pages.launch.Component;
const ComparePage = pages.compare.Component;
const TeamAdminPage = pages.team.Component;
const PoolPage = pages.pool.Component;

/** The page a URL opens (null: the main chunk's run list or the login page). */
function pageOf(path: string): keyof typeof pages | null {
  if (/^\/runs\/\d+/.test(path)) return "run";
  if (/^\/launch/.test(path)) return "launch";
  if (/^\/(experiments\/\d+\/)?compare/.test(path)) return "compare";
  if (/^\/team/.test(path)) return "team";
  if (/^\/pools/.test(path)) return "pool";
  return null;
}

// the page of the URL the app was opened on loads beside the session check, not after it
const firstPage = pageOf(window.location.pathname);
if (firstPage) void pages[firstPage].preload();
prefetchCompareHistory(window.location.pathname);

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
    <SessionProvider>
      <BrowserRouter>
        <Suspense fallback={<Loading />}>
          <Routes>
            <Route path="/login" element={<LoginPage />} />
            <Route element={<RequireSession><Layout /></RequireSession>}>
              <Route index element={<RunsPage />} />
              <Route path="runs/:runId" element={<RunPage />} />
              <Route path="launch" element={<LauncherPage />} />
              <Route path="experiments/:experimentId/compare" element={<ComparePage />} />
              <Route path="compare" element={<ComparePage />} />
              <Route path="team" element={<TeamAdminPage />} />
              <Route path="pools" element={<PoolPage />} />
              <Route path="pools/:poolId" element={<PoolPage />} />
              <Route path="*" element={<ErrorBox error={new Error("No such page.")} />} />
            </Route>
          </Routes>
        </Suspense>
      </BrowserRouter>
    </SessionProvider>
  );
}
