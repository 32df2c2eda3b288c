"""The alarms of workers/alarms.py judged on runs as their metrics arrive, and what follows:
a log line when one begins or stops firing, the run paused when it is armed to, the viewers
told (hooks.run_alarms_changed → live), Prometheus counting them at scrape time.

The beat runs `runs_alarms_judge` every few seconds (experiments/tasks.py): each run whose
step moved past the step its alarms were last judged at has its alarm metrics read (at most
`MAX_POINTS` a metric: min/max per bucket beyond that, so a spike survives) and every rule
applied. Judging twice at one step changes nothing."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.db import transaction
from django.db.models import Count, F, Max, Q
from django.utils import timezone

from paddock.core.errors import DomainError, ErrorCode
from paddock.experiments import hooks
from paddock.experiments.control import run_request_pause
from paddock.experiments.metrics import metric_series
from paddock.experiments.models import DesiredState, Run, RunAlarm, RunEvent
from paddock.experiments.models import RunState as S
from paddock.teams.access import Actor
from paddock.teams.models import Role
from paddock.teams.services import audit_record
from workers.alarms import ALARM_METRICS, ALARMS, Series, evaluate
from workers.live_messages import AlarmRow
from workers.names import ALARM_NAMES

MAX_POINTS = 2000  # per metric and judgement: a bounded read however long the run
# finished runs are judged once more for the steps their last batches brought
FINISHED_RECENTLY = timedelta(minutes=10)
JUDGED = (S.RUNNING, S.PAUSING, S.PAUSED, S.RESUMING)


def runs_alarms_due(*, limit: int = 200) -> list[int]:
    """Runs whose step moved past the step their alarms were last judged at: those training
    now, and those that finished in the last minutes."""
    recent = timezone.now() - FINISHED_RECENTLY
    runs = (
        Run.objects.filter(Q(state__in=JUDGED) | Q(finished_at__gte=recent), step__gt=0)
        .annotate(judged=Max("alarms__step"))
        .filter(Q(judged__isnull=True) | Q(step__gt=F("judged")))
        .order_by("id")
        .values_list("id", flat=True)
    )
    return list(runs[:limit])


def run_series(run_id: int) -> dict[str, Series]:
    """The run's alarm metrics as (step, value) series, steps increasing."""
    out = {}
    for key in ALARM_METRICS:
        series = metric_series(run_id=run_id, key=key, max_points=MAX_POINTS)
        out[key] = [(s, y) for s, y in zip(series.step, series.y, strict=True) if y is not None]
    return out


def run_alarms_judge(*, run_id: int) -> list[RunAlarm]:
    """Apply every rule to the run's series as stored now; record what changed. A run that
    vanished meanwhile is nothing to judge."""
    run = Run.objects.filter(pk=run_id).select_related("config").first()
    if run is None:
        return []
    findings = evaluate(run_series(run_id))
    armed = set(run.config.run_spec.alarms.pause_on)
    changed: list[RunAlarm] = []
    now = timezone.now()
    with transaction.atomic():
        rows = _rows(run, armed, lock=True)
        for name, finding in findings.items():
            row = rows[name]
            began = finding is not None and not row.firing
            ended = finding is None and row.firing
            row.step = run.step
            row.firing = finding is not None
            row.since_step = finding.since_step if finding else None
            row.value = finding.value if finding else None
            row.message = finding.message if finding else ""
            if began:
                row.fired_at = now
                _log(run, "warning", f"alarm {name}: {finding.message}")
            if ended:
                _log(run, "info", f"alarm {name} cleared")
            row.save()
            if began or ended:
                changed.append(row)
        paused = [r for r in changed if r.firing and r.pause]
    for row in paused:
        _pause(run, row)
    if changed:
        transaction.on_commit(lambda: hooks.run_alarms_changed(run_id))
    return list(rows.values())


def _rows(run: Run, armed: set[str], *, lock: bool = False) -> dict[str, RunAlarm]:
    """The run's alarm rows, one per alarm, made where missing (armed as the spec says)."""
    rows = RunAlarm.objects.filter(run=run)
    have = {r.name: r for r in (rows.select_for_update() if lock else rows)}
    missing = [
        RunAlarm(run=run, name=name, pause=name in armed)
        for name in ALARM_NAMES
        if name not in have
    ]
    if missing:
        RunAlarm.objects.bulk_create(missing, ignore_conflicts=True)
        have = {r.name: r for r in RunAlarm.objects.filter(run=run)}
    return have


def _log(run: Run, level: str, message: str) -> None:
    RunEvent.objects.create(
        run=run, dispatch=run.last_dispatch, kind=RunEvent.Kind.LOG, level=level,
        message=message, time=timezone.now(),
    )  # fmt: skip


def _pause(run: Run, row: RunAlarm) -> None:
    """The usual pause (a checkpoint, then the run waits for a resume), asked by the
    platform for the alarm, audited with it; nothing when a user asked otherwise already."""
    current = Run.objects.get(pk=run.pk)
    if current.state != S.RUNNING or current.desired_state != DesiredState.RUNNING:
        return
    try:
        run_request_pause(actor=None, run=current, why=f"alarm {row.name}: {row.message}")
    except DomainError as exc:  # it finished or is being aborted meanwhile
        if exc.code not in (ErrorCode.RUN_FINISHED, ErrorCode.RUN_ABORTING):
            raise


def run_alarm_arm(*, actor: Actor, run: Run, name: str, pause: bool) -> RunAlarm:
    """Arm (or disarm) an alarm to pause the run when it fires. An alarm firing already
    when armed pauses the run at once."""
    actor.require(run.team_id, Role.MEMBER, what="run")
    if name not in ALARMS:
        raise DomainError(ErrorCode.INVALID, f"no alarm {name!r}", field="alarm")
    with transaction.atomic():
        row = _rows(run, set(run.config.run_spec.alarms.pause_on), lock=True)[name]
        if row.pause == pause:
            return row
        row.pause = pause
        row.save(update_fields=["pause", "updated_at"])
        audit_record(
            actor=actor, team_id=run.team_id, action="run.alarm_arm", target_type="run",
            target_id=run.pk, data={"alarm": name, "pause": pause},
        )  # fmt: skip
        transaction.on_commit(lambda: hooks.run_alarms_changed(run.pk))
    if pause and row.firing:
        _pause(run, row)
    return row


def run_alarms(*, run: Run) -> list[RunAlarm]:
    """The run's alarms in the order of workers/alarms.py (those never judged nor armed are
    quiet rows not stored yet)."""
    have = {r.name: r for r in RunAlarm.objects.filter(run=run)}
    armed = set(run.config.run_spec.alarms.pause_on)
    return [have.get(n) or RunAlarm(run=run, name=n, pause=n in armed) for n in ALARM_NAMES]


def alarm_rows(alarms: Iterable[RunAlarm]) -> list[AlarmRow]:
    """The rows as the live stream and the REST API send them."""
    return [
        AlarmRow(
            name=a.name,
            firing=a.firing,
            since_step=a.since_step,
            step=a.step,
            value=a.value,
            message=a.message,
            pause=a.pause,
            about=ALARMS[a.name].summary,
        )  # fmt: skip
        for a in alarms
    ]


def alarms_firing_counts() -> dict[str, int]:
    """Unfinished runs each alarm fires on now (Prometheus, at scrape time)."""
    counts = dict.fromkeys(ALARM_NAMES, 0)
    firing = RunAlarm.objects.filter(firing=True, run__state__in=JUDGED)
    for row in firing.values("name").annotate(n=Count("id")):
        counts[row["name"]] = row["n"]
    return counts
