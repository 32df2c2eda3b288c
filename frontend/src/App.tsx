import { lazy, Suspense, type ReactNode } from "react";
import { BrowserRouter, Navigate, Route, Routes, useLocation } from "react-router";
import { SessionProvider, useSession } from "./session/SessionContext";
import { LoginPage } from "./session/LoginPage";
import { Layout } from "./ui/Layout";
import { ErrorBox, Loading } from "./ui/States";
import { RunsPage } from "./experiments/RunsPage";

// The run list is the landing page and ships in the main chunk; the others load on demand.
const RunPage = lazy(() => import("./runs/RunPage"));
const LauncherPage = lazy(() => import("./launcher/LauncherPage"));
const ComparePage = lazy(() => import("./compare/ComparePage"));
const TeamAdminPage = lazy(() => import("./teams/TeamAdminPage"));

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
              <Route path="*" element={<ErrorBox error={new Error("No such page.")} />} />
            </Route>
          </Routes>
        </Suspense>
      </BrowserRouter>
    </SessionProvider>
  );
}
