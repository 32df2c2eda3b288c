import { useSession } from "./SessionContext";

export function TeamSwitcher() {
  const { session, team, setTeam } = useSession();
  if (!session) return null;
  if (session.teams.length === 0) return <span className="muted">no team</span>;
  return (
    <label className="team-switcher">
      <span className="sr-only">Team</span>
      <select aria-label="Team" value={team?.id ?? ""} onChange={(e) => setTeam(Number(e.target.value))}>
        {session.teams.map((t) => (
          <option key={t.id} value={t.id}>{t.name} · {t.role}</option>
        ))}
      </select>
    </label>
  );
}
