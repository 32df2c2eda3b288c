// Who is logged in and which team they are looking at. The session is a query (GET
// /session/me); logging in or out writes its answer into the cache. The team choice
// persists per browser; every list and launch is scoped to it.
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { createContext, useContext, useEffect, useMemo, useState, type ReactNode } from "react";
import type { ApiError } from "../api/client";
import { queryKeys } from "../api/queryKeys";
import { login as apiLogin, logout as apiLogout, sessionQuery } from "../api/session";
import type { Role, Session, TeamRef } from "../api/types";

interface SessionState {
  session: Session | null;
  loading: boolean;
  error: ApiError | null;
  team: TeamRef | null;
  setTeam: (teamId: number) => void;
  login: (username: string, password: string) => Promise<void>;
  logout: () => Promise<void>;
  refresh: () => void;
  /** the current team role is at least `role` */
  can: (role: Role) => boolean;
}

const Ctx = createContext<SessionState | null>(null);
const TEAM_KEY = "paddock.team";
const RANK: Record<Role, number> = { viewer: 0, member: 1, admin: 2, owner: 3 };

/** Every answer but the session's: another user, or another team, sees other data. */
const notSession = { predicate: (q: { queryKey: readonly unknown[] }) => q.queryKey[0] !== queryKeys.session[0] };

export function SessionProvider({ children }: { children: ReactNode }) {
  const client = useQueryClient();
  const me = useQuery(sessionQuery);
  const session = me.data ?? null;
  const { isPending, error, refetch } = me;
  const [teamId, setTeamId] = useState<number | null>(() => Number(localStorage.getItem(TEAM_KEY)) || null);

  useEffect(() => {
    // any API call answered 401 (an expired session) sends the user back to the login page
    const onUnauth = () => client.setQueryData(queryKeys.session, null);
    window.addEventListener("paddock:unauthenticated", onUnauth);
    return () => window.removeEventListener("paddock:unauthenticated", onUnauth);
  }, [client]);

  const team = useMemo(() => {
    if (!session || session.teams.length === 0) return null;
    return session.teams.find((t) => t.id === teamId) ?? session.teams[0];
  }, [session, teamId]);

  const value = useMemo<SessionState>(() => ({
    session, loading: isPending, error, team,
    setTeam: (id) => { localStorage.setItem(TEAM_KEY, String(id)); setTeamId(id); void client.resetQueries(notSession); },
    login: async (username, password) => {
      const answer = await apiLogin(username, password);
      client.removeQueries(notSession);
      client.setQueryData(queryKeys.session, answer);
    },
    logout: async () => {
      await apiLogout();
      client.removeQueries(notSession);
      client.setQueryData(queryKeys.session, null);
    },
    refresh: () => void refetch(),
    can: (role) => !!team && RANK[team.role] >= RANK[role],
  }), [session, isPending, error, refetch, team, client]);

  return <Ctx.Provider value={value}>{children}</Ctx.Provider>;
}

export function useSession(): SessionState {
  const value = useContext(Ctx);
  if (!value) throw new Error("useSession outside SessionProvider");
  return value;
}
