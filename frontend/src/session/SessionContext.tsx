// Who is logged in and which team they are looking at. The team choice persists per
// browser; every list and launch is scoped to it.
import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from "react";
import { ApiError } from "../api/client";
import { fetchSession, login as apiLogin, logout as apiLogout } from "../api/session";
import { clearCache } from "../api/useQuery";
import type { Role, Session, TeamRef } from "../api/types";

interface SessionState {
  session: Session | null;
  loading: boolean;
  error: ApiError | null;
  team: TeamRef | null;
  setTeam: (teamId: number) => void;
  login: (username: string, password: string) => Promise<void>;
  logout: () => Promise<void>;
  refresh: () => Promise<void>;
  /** the current team role is at least `role` */
  can: (role: Role) => boolean;
}

const Ctx = createContext<SessionState | null>(null);
const TEAM_KEY = "paddock.team";
const RANK: Record<Role, number> = { viewer: 0, member: 1, admin: 2, owner: 3 };

export function SessionProvider({ children }: { children: ReactNode }) {
  const [session, setSession] = useState<Session | null>(null);
  const [loading, setLoading] = useState(true);
  const [error, setError] = useState<ApiError | null>(null);
  const [teamId, setTeamId] = useState<number | null>(() => Number(localStorage.getItem(TEAM_KEY)) || null);

  const refresh = useCallback(async () => {
    try {
      setSession(await fetchSession());
      setError(null);
    } catch (err) {
      setSession(null);
      if (err instanceof ApiError && !err.isUnauthenticated) setError(err);
    } finally {
      setLoading(false);
    }
  }, []);

  useEffect(() => { void refresh(); }, [refresh]);
  useEffect(() => {
    // any API call answered 401 (an expired session) sends the user back to the login page
    const onUnauth = () => setSession(null);
    window.addEventListener("paddock:unauthenticated", onUnauth);
    return () => window.removeEventListener("paddock:unauthenticated", onUnauth);
  }, []);

  const team = useMemo(() => {
    if (!session || session.teams.length === 0) return null;
    return session.teams.find((t) => t.id === teamId) ?? session.teams[0];
  }, [session, teamId]);

  const value = useMemo<SessionState>(() => ({
    session, loading, error, team,
    setTeam: (id) => { localStorage.setItem(TEAM_KEY, String(id)); setTeamId(id); clearCache(); },
    login: async (username, password) => { setSession(await apiLogin(username, password)); },
    logout: async () => { await apiLogout(); setSession(null); },
    refresh,
    can: (role) => !!team && RANK[team.role] >= RANK[role],
  }), [session, loading, error, team, refresh]);

  return <Ctx.Provider value={value}>{children}</Ctx.Provider>;
}

export function useSession(): SessionState {
  const value = useContext(Ctx);
  if (!value) throw new Error("useSession outside SessionProvider");
  return value;
}
