// A run's alarms (docs/alarms.md): those firing first, each saying what it saw and since
// which step; every alarm can be armed to pause the run when it fires (members and up).
// The stream keeps them current (liveCache.ts writeAlarms).
import { useMutation } from "@tanstack/react-query";
import { armAlarm, useRunAlarms } from "../api/alarms";
import type { AlarmName, AlarmRow } from "../api/types";
import { useSession } from "../session/SessionContext";
import { ErrorBox } from "../ui/States";

/** "entropy_collapse" → "entropy collapse" */
export function alarmLabel(name: AlarmName): string {
  return name.replace(/_/g, " ");
}

/** The firing ones first, then the rest, each group in the rules' order. */
export function alarmOrder(alarms: readonly AlarmRow[]): AlarmRow[] {
  return [...alarms.filter((a) => a.firing), ...alarms.filter((a) => !a.firing)];
}

export function RunAlarms({ runId }: { runId: number }) {
  const { can } = useSession();
  const alarms = useRunAlarms(runId);
  const arm = useMutation({ mutationFn: ({ name, pause }: { name: AlarmName; pause: boolean }) => armAlarm(runId, name, pause) });
  const rows = alarmOrder(alarms.data?.alarms ?? []);
  const firing = rows.filter((a) => a.firing).length;
  return (
    <section className={`card alarms ${firing ? "firing" : ""}`} data-testid="alarms">
      <h2>Alarms {firing ? <span className="badge tone-bad" data-testid="alarms-firing">{firing} firing</span>
        : <span className="muted small">all quiet</span>}</h2>
      <ErrorBox error={alarms.error ?? arm.error} />
      <ul className="alarm-list">
        {rows.map((a) => (
          <li key={a.name} className={a.firing ? "alarm firing" : "alarm"} data-testid="alarm" data-alarm={a.name}
            data-firing={a.firing}>
            <strong>{alarmLabel(a.name)}</strong>{" "}
            {a.firing ? <span data-testid="alarm-message">{a.message}</span> : <span className="muted">{a.about}</span>}
            <label className="check small" title="a checkpoint, then the run waits for a resume">
              <input type="checkbox" checked={a.pause} disabled={!can("member") || arm.isPending}
                onChange={(e) => arm.mutate({ name: a.name, pause: e.target.checked })} data-testid={`arm-${a.name}`} />
              {" "}pause the run when it fires
            </label>
          </li>
        ))}
      </ul>
    </section>
  );
}

/** Compact: the alarms firing on a run, for a table cell (compare, sweep). */
export function FiringAlarms({ alarms }: { alarms: readonly AlarmRow[] | undefined }) {
  const firing = (alarms ?? []).filter((a) => a.firing);
  if (!firing.length) return <span className="muted small">—</span>;
  return (
    <span className="firing-alarms" data-testid="firing-alarms">
      {firing.map((a) => (
        <span key={a.name} className="badge tone-bad" title={a.message}>{alarmLabel(a.name)} @{a.since_step}</span>
      ))}
    </span>
  );
}
