"""What a viewer receives on connect: a snapshot of a run, or what was stored after its
cursor (so a reconnect leaves no gap). Synchronous ORM code; consumers call it in a thread."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db import connection
from django.db.models import F, Q, Window
from django.db.models.functions import RowNumber

from paddock.experiments.models import MetricPoint, Run, RunEvent
from paddock.experiments.selectors import sample_sets_newest

from .models import BatchSummary

SNAPSHOT_POINTS = 500  # per key: the recent window; older history comes from the REST API
SNAPSHOT_LOGS = 100
SNAPSHOT_SAMPLES = 5  # sample sets (steps); older ones from GET /api/v1/runs/<id>/samples


def _cursor(run: Run) -> dict[str, int]:
    return {"dispatch": run.last_dispatch, "seq": run.last_seq}


def _run_fields(run: Run) -> dict[str, Any]:
    return {
        "state": run.state,
        "desired_state": run.desired_state,
        "step": run.step,
        "total_steps": run.total_steps,
        "backend": run.backend,
        "seed": run.seed,
        "error": run.error,
        "queued_reason": run.queued_reason,
    }


def _log_row(event: RunEvent) -> dict[str, Any]:
    return {
        "id": event.id,  # ?before=<the oldest id> on /api/v1/runs/<id>/events scrolls back
        "time": event.time.timestamp(),
        "level": event.level,
        "message": event.message,
        "kind": event.kind,
    }


# The newest `n` points of every key of a run in one statement, whatever the number of keys
# (a query per key made a snapshot cost grow with them). The keys come from a walk of the
# (run, key, step) index, one step per key, where DISTINCT read every point of the run; then
# each key's newest points are a backward scan of the same index, sent as three arrays per
# key: a row per point cost the snapshot more CPU in the driver than the query took.
_TABLE = MetricPoint._meta.db_table
_RECENT_POINTS = f"""
WITH RECURSIVE keys(key) AS (
    (SELECT key FROM {_TABLE} WHERE run_id = %(run)s ORDER BY key LIMIT 1)
    UNION ALL
    SELECT (SELECT p.key FROM {_TABLE} p WHERE p.run_id = %(run)s AND p.key > keys.key
            ORDER BY p.key LIMIT 1)
    FROM keys WHERE keys.key IS NOT NULL
)
SELECT keys.key, recent.steps, recent.vals, recent.times
FROM keys CROSS JOIN LATERAL (
    SELECT array_agg(r.step ORDER BY r.step) AS steps, array_agg(r.value ORDER BY r.step) AS vals,
           array_agg(r.time ORDER BY r.step) AS times
    FROM (SELECT p.step, p.value, p.time FROM {_TABLE} p
          WHERE p.run_id = %(run)s AND p.key = keys.key ORDER BY p.step DESC LIMIT %(n)s) AS r
) AS recent
WHERE keys.key IS NOT NULL
ORDER BY keys.key
"""


def recent_points(run_id: int, per_key: int) -> dict[str, list[list]]:
    """Each key's newest `per_key` points as [step, value, time], oldest first; one query."""
    if connection.vendor != "postgresql":  # SQLite (`paddock up` alone)
        points: dict[str, list[list]] = {}
        for key, step, value, at in recent_points_rows_portable(run_id, per_key):
            points.setdefault(key, []).append([step, value, at])
        return points
    with connection.cursor() as cursor:
        cursor.execute(_RECENT_POINTS, {"run": run_id, "n": per_key})
        rows = cursor.fetchall()
    return {key: list(map(list, zip(steps, values, times, strict=True)))
            for key, steps, values, times in rows}  # fmt: skip


def recent_points_rows_portable(run_id: int, per_key: int):
    """(key, step, value, time) rows of `recent_points` for any database: a window over all
    of the run's points, so for SQLite's small deployments only."""
    rank = Window(RowNumber(), partition_by=[F("key")], order_by=F("step").desc())
    return (
        MetricPoint.objects.filter(run_id=run_id)
        .annotate(rank=rank)
        .filter(rank__lte=per_key)
        .order_by("key", "step")
        .values_list("key", "step", "value", "time")
    )


def run_snapshot(run_id: int, points_per_key: int = SNAPSHOT_POINTS) -> dict[str, Any]:
    """Four queries however many keys, points, logs and samples the run has."""
    run = Run.objects.get(pk=run_id)
    points = recent_points(run_id, points_per_key)
    latest = {key: rows[-1][1] for key, rows in points.items()}
    logs = list(RunEvent.objects.filter(run_id=run_id).order_by("-id")[:SNAPSHOT_LOGS])
    logs.reverse()
    samples = sample_sets_newest(run_id=run_id, limit=SNAPSHOT_SAMPLES)
    samples.reverse()
    return {
        "type": "snapshot",
        "run_id": run_id,
        "cursor": _cursor(run),
        "run": _run_fields(run),
        "latest": latest,
        "points": points,
        "logs": [_log_row(e) for e in logs],
        "samples": [{"step": s.step, "items": s.items} for s in samples],
    }


def run_replay(run_id: int, after: tuple[int, int]) -> list[dict[str, Any]]:
    """Messages for everything stored after cursor `after`, oldest first, ending with the
    run's state. Steps are re-sent from the smallest step of the later batches, events
    after the last event the cursor's batch had seen."""
    run = Run.objects.get(pk=run_id)
    dispatch, seq = after
    later = BatchSummary.objects.filter(run_id=run_id).filter(
        Q(dispatch__gt=dispatch) | Q(dispatch=dispatch, seq__gt=seq)
    )
    seen = (
        BatchSummary.objects.filter(run_id=run_id)
        .filter(Q(dispatch__lt=dispatch) | Q(dispatch=dispatch, seq__lte=seq))
        .order_by("-dispatch", "-seq")
        .values_list("last_event_id", flat=True)
        .first()
    )
    cursor = _cursor(run)
    messages: list[dict[str, Any]] = []
    min_step = min(
        (s for s in later.values_list("min_step", flat=True) if s is not None), default=None
    )
    if min_step is not None:
        by_step: dict[int, dict[str, Any]] = defaultdict(lambda: {"values": {}, "time": 0.0})
        rows = MetricPoint.objects.filter(run_id=run_id, step__gte=min_step).values_list(
            "step", "key", "value", "time"
        )
        for step, key, value, at in rows:
            by_step[step]["values"][key] = value
            by_step[step]["time"] = max(by_step[step]["time"], at)
        steps = [{"step": s, **by_step[s]} for s in sorted(by_step)]
        messages.append({"type": "metrics", "run_id": run_id, "cursor": cursor, "steps": steps})
    events = RunEvent.objects.filter(run_id=run_id, id__gt=seen or 0).order_by("id")
    for event in events:
        messages.append({"type": "log", "run_id": run_id, "cursor": cursor, **_log_row(event)})
    detail = run.error or run.queued_reason  # as broadcast_state words it
    messages.append(
        {"type": "state", "run_id": run_id, "cursor": cursor, **_run_fields(run), "detail": detail}
    )
    return messages


def experiment_run_ids(experiment_id: int) -> list[int]:
    return list(Run.objects.filter(experiment_id=experiment_id).values_list("id", flat=True))
