import { NavLink, Outlet, useNavigate } from "react-router";
import { TeamSwitcher } from "../session/TeamSwitcher";
import { useSession } from "../session/SessionContext";

export function Layout() {
  const { session, logout, can } = useSession();
  const navigate = useNavigate();
  return (
    <div className="app">
      <header className="topbar">
        <NavLink to="/" className="brand"><span className="logo-mark">P</span>Paddock</NavLink>
        <nav>
          <NavLink to="/" end>Runs</NavLink>
          {can("member") && <NavLink to="/launch">Launch</NavLink>}
          <NavLink to="/team">Team</NavLink>
          <NavLink to="/sweeps">Sweeps</NavLink>
          <NavLink to="/pools">Pools</NavLink>
        </nav>
        <div className="topbar-right">
          <TeamSwitcher />
          <span className="user" title={session?.user.email}>{session?.user.username}</span>
          <button className="btn ghost small" onClick={async () => { await logout(); navigate("/login"); }}>
            Log out
          </button>
        </div>
      </header>
      <main className="content"><Outlet /></main>
    </div>
  );
}
