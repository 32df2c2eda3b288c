"""What a viewer receives on connect: a snapshot of a run, or what was stored after its
cursor (so a reconnect leaves no gap). Synchronous ORM code; consumers call it in a thread."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import Q

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


def run_snapshot(run_id: int, points_per_key: int = SNAPSHOT_POINTS) -> dict[str, Any]:
    run = Run.objects.get(pk=run_id)
    keys = list(MetricPoint.objects.filter(run_id=run_id).values_list("key", flat=True).distinct())
    points: dict[str, list] = {}
    latest: dict[str, float] = {}
    for key in keys:
        rows = list(
            MetricPoint.objects.filter(run_id=run_id, key=key)
            .order_by("-step")
            .values_list("step", "value", "time")[:points_per_key]
        )
        rows.reverse()
        points[key] = [list(r) for r in rows]
        if rows:
            latest[key] = rows[-1][1]
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
