// Team admin: members and roles, API tokens (the secret shown once), team secrets (never
// shown), quota, audit log.
import { useRef, useState, type FormEvent } from "react";
import { ApiError } from "../api/client";
import { addMember, createToken, removeMember, revokeToken, setMemberRole, useAudit, useDeleteSecret,
  useMembers, useQuota, useSecrets, useSetSecret, useTokens } from "../api/teams";
import type { CreatedToken, Role } from "../api/types";
import { timeAgo } from "../lib/format";
import { useSession } from "../session/SessionContext";
import { Empty, ErrorBox, Query } from "../ui/States";

const ROLES: Role[] = ["viewer", "member", "admin", "owner"];

function useAction() {
  const [error, setError] = useState<ApiError | null>(null);
  const [pending, setPending] = useState(false);
  const run = async (fn: () => Promise<unknown>) => {
    setError(null); setPending(true);
    try { await fn(); return true; } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
      return false;
    } finally { setPending(false); }
  };
  return { error, pending, run };
}

function Members({ teamId, canAdmin, me }: { teamId: number; canAdmin: boolean; me: number }) {
  const members = useMembers(teamId);
  const action = useAction();
  const [username, setUsername] = useState("");
  const [role, setRole] = useState<Role>("member");
  async function add(e: FormEvent) {
    e.preventDefault();
    if (await action.run(() => addMember(teamId, username, role))) setUsername("");
  }
  return (
    <section className="card">
      <h2>Members</h2>
      <ErrorBox error={action.error} />
      <Query result={members} isEmpty={(d) => d.length === 0} empty={<Empty title="No members" />}>
        {(list) => (
          <table className="compact">
            <thead><tr><th>User</th><th>Role</th><th>Since</th><th /></tr></thead>
            <tbody>
              {list.map((m) => (
                <tr key={m.user.id}>
                  <td>{m.user.username}{m.user.id === me && <span className="muted"> (you)</span>}</td>
                  <td>
                    {canAdmin ? (
                      <select value={m.role} aria-label={`role of ${m.user.username}`} disabled={action.pending}
                        onChange={(e) => void action.run(() => setMemberRole(teamId, m.user.id, e.target.value as Role))}>
                        {ROLES.map((r) => <option key={r}>{r}</option>)}
                      </select>
                    ) : <span className="role">{m.role}</span>}
                  </td>
                  <td className="muted">{timeAgo(m.created_at)}</td>
                  <td>{canAdmin && m.user.id !== me && (
                    <button className="btn small ghost" disabled={action.pending}
                      onClick={() => window.confirm(`Remove ${m.user.username} from the team?`) &&
                        void action.run(() => removeMember(teamId, m.user.id))}>Remove</button>
                  )}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Query>
      {canAdmin && (
        <form className="inline-form" onSubmit={add}>
          <input placeholder="username" aria-label="Username to add" value={username} onChange={(e) => setUsername(e.target.value)} required />
          <select aria-label="Role" value={role} onChange={(e) => setRole(e.target.value as Role)}>
            {ROLES.map((r) => <option key={r}>{r}</option>)}
          </select>
          <button className="btn" disabled={action.pending || !username}>Add member</button>
        </form>
      )}
    </section>
  );
}

function Tokens({ teamId }: { teamId: number }) {
  const tokens = useTokens(teamId);
  const action = useAction();
  const [name, setName] = useState("");
  const [created, setCreated] = useState<CreatedToken | null>(null);
  const [copied, setCopied] = useState(false);
  async function create(e: FormEvent) {
    e.preventDefault();
    await action.run(async () => { setCreated(await createToken(teamId, name)); setCopied(false); setName(""); });
  }
  return (
    <section className="card">
      <h2>API tokens</h2>
      <p className="muted small">For the CLI and scripts: <code>Authorization: Bearer &lt;token&gt;</code>. A token acts as you, in this team only.</p>
      <ErrorBox error={action.error} />
      {created && (
        <div className="secret-once" role="status" data-testid="token-secret">
          <strong>Copy the token “{created.name}” now: it is shown this once.</strong>
          <div className="secret-row">
            <code className="secret">{created.token}</code>
            {navigator.clipboard && (  // only in a secure context (https or localhost)
              <button className="btn small" onClick={async () => {
                await navigator.clipboard.writeText(created.token); setCopied(true);
              }}>{copied ? "Copied" : "Copy"}</button>
            )}
            <button className="btn small ghost" onClick={() => setCreated(null)}>Done</button>
          </div>
        </div>
      )}
      <form className="inline-form" onSubmit={create}>
        <input placeholder="token name, e.g. laptop" aria-label="Token name" value={name} onChange={(e) => setName(e.target.value)} required />
        <button className="btn" disabled={action.pending || !name}>Create token</button>
      </form>
      <Query result={tokens} isEmpty={(d) => d.length === 0} empty={<Empty title="No tokens" />}>
        {(list) => (
          <table className="compact" data-testid="tokens-table">
            <thead><tr><th>Name</th><th>Prefix</th><th>Owner</th><th>Created</th><th>Last used</th><th /></tr></thead>
            <tbody>
              {list.map((t) => (
                <tr key={t.id} className={t.revoked_at ? "revoked" : ""}>
                  <td>{t.name}</td><td><code>{t.prefix}…</code></td><td>{t.user?.username ?? "—"}</td>
                  <td className="muted">{timeAgo(t.created_at)}</td>
                  <td className="muted">{t.last_used_at ? timeAgo(t.last_used_at) : "never"}</td>
                  <td>{t.revoked_at ? <span className="badge tone-bad">revoked</span> : (
                    <button className="btn small danger" disabled={action.pending}
                      onClick={() => window.confirm(`Revoke “${t.name}”? Programs using it stop at once.`) &&
                        void action.run(() => revokeToken(teamId, t.id))}>Revoke</button>
                  )}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Query>
    </section>
  );
}

/** The API's refusal of a field as the field's own message; anything else for the ErrorBox. */
function splitByField(error: ApiError | null, fields: readonly string[]) {
  const byField = Object.fromEntries(fields.map((f) => [f, error?.fields[f] ?? (error?.field === f ? error.message : null)]));
  const other = error && !fields.some((f) => byField[f]) ? error : null;
  return { byField, other };
}

function Secrets({ teamId, canAdmin }: { teamId: number; canAdmin: boolean }) {
  const secrets = useSecrets(teamId);
  const setting = useSetSecret(teamId);
  const deleting = useDeleteSecret(teamId);
  const [name, setName] = useState("");
  const [value, setValue] = useState("");
  const [done, setDone] = useState<string | null>(null);
  const valueInput = useRef<HTMLInputElement>(null);
  const { byField, other } = splitByField(setting.error, ["name", "value"]);
  async function set(e: FormEvent) {
    e.preventDefault();
    setDone(null);
    try {
      const row = await setting.mutateAsync({ name, value });
      // the value leaves the page's state once the server has it
      setValue(""); setName(""); setDone(row.name); setting.reset();
    } catch { /* shown from setting.error */ }
  }
  function replace(secretName: string) {
    setName(secretName); setValue(""); setDone(null); setting.reset();
    valueInput.current?.focus();
  }
  const busy = setting.isPending || deleting.isPending;
  return (
    <section className="card" data-testid="secrets">
      <h2>Secrets</h2>
      <p className="muted small">Credentials a run’s spec names (<code>secret: NAME</code>, e.g. a reward service’s token),
        handed only to that run’s job. A value is never shown again, here or through the API.</p>
      <ErrorBox error={other ?? deleting.error} />
      {done && <p className="muted small" role="status">Secret “{done}” set.</p>}
      <Query result={secrets} isEmpty={(d) => d.length === 0} empty={<Empty title="No secrets" />}>
        {(list) => (
          <table className="compact" data-testid="secrets-table">
            <thead><tr><th>Name</th><th>Value</th><th>Updated</th><th>By</th>{canAdmin && <th />}</tr></thead>
            <tbody>
              {list.map((x) => (
                <tr key={x.name}>
                  <td><code>{x.name}</code></td><td><code>{x.masked}</code></td>
                  <td className="muted" title={x.updated_at}>{timeAgo(x.updated_at)}</td>
                  <td>{x.updated_by?.username ?? "—"}</td>
                  {canAdmin && <td className="nowrap">
                    <button className="btn small ghost" disabled={busy} onClick={() => replace(x.name)}>Replace</button>{" "}
                    <button className="btn small danger" disabled={busy}
                      onClick={() => window.confirm(`Delete the secret “${x.name}”? A run whose spec names it cannot start until it is set again.`) &&
                        deleting.mutate(x.name)}>Delete</button>
                  </td>}
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Query>
      {canAdmin && (
        <form className="inline-form" onSubmit={set}>
          <div className="input-col">
            <input placeholder="name, e.g. REWARD_TOKEN" aria-label="Secret name" value={name} onChange={(e) => setName(e.target.value)}
              required autoComplete="off" spellCheck={false} aria-invalid={!!byField.name} />
            {byField.name && <span className="field-error" role="alert">{byField.name}</span>}
          </div>
          <div className="input-col">
            <input ref={valueInput} type="password" placeholder="value" aria-label="Secret value" value={value}
              onChange={(e) => setValue(e.target.value)} required autoComplete="new-password" aria-invalid={!!byField.value} />
            {byField.value && <span className="field-error" role="alert">{byField.value}</span>}
          </div>
          <button className="btn" disabled={busy || !name || !value}>Set secret</button>
        </form>
      )}
    </section>
  );
}

function QuotaCard({ teamId }: { teamId: number }) {
  const quota = useQuota(teamId);
  return (
    <section className="card">
      <h2>Quota</h2>
      <Query result={quota}>
        {(q) => (
          <dl className="quota">
            <div><dt>Concurrent runs</dt><dd>{q.running_runs ?? q.active_runs ?? "—"} / {q.max_concurrent_runs}</dd></div>
            <div><dt>GPUs</dt><dd>{q.gpus_in_use ?? "—"} / {q.max_gpus}</dd></div>
            <div><dt>Queued runs (max)</dt><dd>{q.max_queued_runs}</dd></div>
          </dl>
        )}
      </Query>
    </section>
  );
}

function Audit({ teamId }: { teamId: number }) {
  const audit = useAudit(teamId);
  return (
    <section className="card wide">
      <h2>Audit log</h2>
      <Query result={audit} isEmpty={(d) => d.length === 0} empty={<Empty title="Nothing recorded yet" />}>
        {(events) => (
          <div className="table-scroll">
            <table className="compact">
              <thead><tr><th>When</th><th>Who</th><th>Action</th><th>Target</th><th>Details</th></tr></thead>
              <tbody>
                {events.map((e) => (
                  <tr key={e.id}>
                    <td className="muted nowrap" title={e.created_at}>{timeAgo(e.created_at)}</td>
                    <td>{e.actor?.username ?? "system"}</td>
                    <td><code>{e.action}</code></td>
                    <td>{e.target_type} {e.target_id}</td>
                    <td className="muted ellipsis" title={JSON.stringify(e.data)}>{e.data && Object.keys(e.data).length ? JSON.stringify(e.data) : ""}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </Query>
    </section>
  );
}

export default function TeamAdminPage() {
  const { team, session, can } = useSession();
  if (!team || !session) return <Empty title="You are not in a team" />;
  return (
    <div className="team-page">
      <h1>{team.name} <span className="role">{team.role}</span></h1>
      <div className="card-grid">
        <Members teamId={team.id} canAdmin={can("admin")} me={session.user.id} />
        <Tokens teamId={team.id} />
        <Secrets teamId={team.id} canAdmin={can("admin")} />
        <QuotaCard teamId={team.id} />
        {can("admin") && <Audit teamId={team.id} />}
      </div>
    </div>
  );
}
