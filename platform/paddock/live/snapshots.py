"""What a viewer receives on connect: a snapshot of a run, or what was stored after its
cursor (so a reconnect leaves no gap), each message built with its model of
workers/live_messages.py. Synchronous ORM code; consumers call it in a thread."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Max, Q, Window
from django.db.models.functions import RowNumber
from pydantic import BaseModel

from paddock.core.fixed_sql import QueryTemplate, postgresql, statement_cursor
from paddock.experiments.metrics import RUN_KEYS_WALK
from paddock.experiments.models import MetricPoint, Run, RunEvent, SampleSet
from workers.live_messages import (
    LogMessage,
    MetricsMessage,
    MetricStep,
    RunFields,
    SnapshotMessage,
)

from .broadcast import STATE_COLUMNS, state_message
from .models import BatchSummary

SNAPSHOT_POINTS = 500  # per key: the recent window; older history comes from the REST API
SNAPSHOT_LOGS = 100
SNAPSHOT_SAMPLES = 5  # sample sets (steps); older ones from GET /api/v1/runs/<id>/samples


RUN_FIELDS = tuple(RunFields.model_fields)


def _log_fields(event: dict[str, Any]) -> dict[str, Any]:
    """A RunEvent's row (id, time, level, message, kind) as the stream sends it: its time
    in Unix seconds."""
    return {**event, "time": event["time"].timestamp()}


# A snapshot's reads as compiled statements (core/fixed_sql.py's QueryTemplate): every
# connect makes them, and the ORM built each anew, about half a snapshot's CPU.
_RUN = QueryTemplate(
    lambda _shape, ids: Run.objects.filter(pk=ids[0]).values(
        *RUN_FIELDS, "last_dispatch", "last_seq"
    )
)
_LOGS = QueryTemplate(
    lambda _shape, ids: (
        RunEvent.objects.filter(run_id=ids[0])
        .order_by("-id")
        .values("id", "time", "level", "message", "kind")[:SNAPSHOT_LOGS]
    )
)


def _newest_sample_sets(_shape, ids):
    """selectors.sample_sets_newest(run_id=…, limit=SNAPSHOT_SAMPLES) as a queryset: the
    newest set of each step, newest steps first."""
    newest = (
        SampleSet.objects.filter(run_id=ids[0]).values("step").annotate(newest=Max("id"))
    ).values("newest")
    return (
        SampleSet.objects.filter(id__in=newest)
        .order_by("-step")
        .values("step", "items")[:SNAPSHOT_SAMPLES]
    )


_SAMPLES = QueryTemplate(_newest_sample_sets)


# The newest `n` points of every key of a run in one statement, whatever the number of keys
# (a query per key made a snapshot cost grow with them). The keys come from a walk of the
# (run, key, step) index, one step per key, where DISTINCT read every point of the run; then
# each key's newest points are a backward scan of the same index, sent as three arrays per
# key: a row per point cost the snapshot more CPU in the driver than the query took.
_TABLE = MetricPoint._meta.db_table
_RECENT_POINTS = f"""
{RUN_KEYS_WALK}SELECT keys.key, recent.steps, recent.vals, recent.times
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
    if not postgresql():  # SQLite (`paddock up` alone)
        points: dict[str, list[list]] = {}
        for key, step, value, at in recent_points_rows_portable(run_id, per_key):
            points.setdefault(key, []).append([step, value, at])
        return points
    with statement_cursor() as cursor:  # prepared: every connect reads it
        cursor.execute(_RECENT_POINTS, {"run": run_id, "n": per_key})
        rows = cursor.fetchall()
    return {key: list(map(list, zip(steps, values, times, strict=True)))
            for key, steps, values, times in rows}  # fmt: skip


# `_RECENT_POINTS` with each key's points as JSON text written by PostgreSQL, byte for byte
# what json.dumps writes for recent_points' lists: a float's shortest round-trip digits are
# the same in both (PostgreSQL 12+, extra_float_digits > 0; NaN and Infinity alike), so
# `_JSON_FLOAT` only adds the ".0" Python writes after an integral value. Python writes 1e15
# to 1e16 in full where PostgreSQL writes an exponent, so a key with a value there is not
# `exact` (nor is any with fewer digits configured), and the snapshot is then encoded in
# Python as before (tests/platform/live/test_snapshot_text.py). Encoding 2 500 points'
# floats was about half a snapshot's CPU in the server.
_JSON_FLOAT = (
    "CASE WHEN {v} = trunc({v}) AND abs({v}) < 1e15 THEN {v}::text || '.0' ELSE {v}::text END"
)
_PYTHON_WRITES_IN_FULL = "(abs({v}) >= 1e15 AND abs({v}) < 1e16)"
_RECENT_POINTS_JSON = f"""
{RUN_KEYS_WALK}SELECT keys.key, recent.points,
       (SELECT p.value FROM {_TABLE} p WHERE p.run_id = %(run)s AND p.key = keys.key
        ORDER BY p.step DESC LIMIT 1) AS last,
       recent.exact
FROM keys CROSS JOIN LATERAL (
    SELECT '[' || string_agg(concat('[', r.step, ', ', {_JSON_FLOAT.format(v="r.value")}, ', ',
                                    {_JSON_FLOAT.format(v="r.time")}, ']'), ', '
                             ORDER BY r.step) || ']' AS points,
           current_setting('extra_float_digits')::int > 0
           AND NOT bool_or({_PYTHON_WRITES_IN_FULL.format(v="r.value")}
                           OR {_PYTHON_WRITES_IN_FULL.format(v="r.time")}) AS exact
    FROM (SELECT p.step, p.value, p.time FROM {_TABLE} p
          WHERE p.run_id = %(run)s AND p.key = keys.key ORDER BY p.step DESC LIMIT %(n)s) AS r
) AS recent
WHERE keys.key IS NOT NULL
ORDER BY keys.key
"""


def recent_points_json(run_id: int, per_key: int) -> tuple[str, dict[str, float]] | None:
    """`recent_points` as the JSON text json.dumps writes for it, and each key's last value;
    None where PostgreSQL cannot write it exactly so (see `_RECENT_POINTS_JSON`)."""
    if not postgresql():
        return None
    with statement_cursor() as cursor:  # prepared: every connect reads it
        cursor.execute(_RECENT_POINTS_JSON, {"run": run_id, "n": per_key})
        rows = cursor.fetchall()
    if not all(exact for *_, exact in rows):
        return None
    text = ", ".join(f"{json.dumps(key)}: {points}" for key, points, _, _ in rows)
    return "{" + text + "}", {key: last for key, _, last, _ in rows}


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
    """The snapshot message as sent; four queries however many keys, points, logs and
    samples the run has."""
    points = recent_points(run_id, points_per_key)
    latest = {key: rows[-1][1] for key, rows in points.items()}
    return _snapshot(run_id, points, latest).model_dump()


# stands in for the points in the snapshot's JSON text until their own text replaces it:
# encoded, it is a JSON string that no other string of the snapshot can contain (theirs
# are escaped: a quote inside one is written \")
_POINTS_HERE = "\x00points\x00"


@contextmanager
def one_moment() -> Iterator[None]:
    """The reads inside see the database as of one moment, so that a snapshot's or a
    replay's cursor covers exactly the points read with it. Read in separate statements, a
    batch stored between two of them was sent twice (its points read, the cursor read
    before it: its live message then passed the consumer's cursor filter) or never (the
    cursor read after it, the points before). PostgreSQL: one REPEATABLE READ transaction
    (read-only here, so it never fails to serialize); SQLite's transaction reads one
    snapshot already; inside a caller's transaction, the caller's."""
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        if postgresql():
            with connection.cursor() as cursor:  # the transaction's first statement
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield


def run_snapshot_text(run_id: int, points_per_key: int = SNAPSHOT_POINTS) -> tuple[str, dict]:
    """json.dumps(run_snapshot(run_id)), byte for byte, with the points written by
    PostgreSQL (`recent_points_json`) where it writes them exactly; and the cursor, all as
    of one moment."""
    with one_moment():
        return _run_snapshot_text(run_id, points_per_key)


def _run_snapshot_text(run_id: int, points_per_key: int) -> tuple[str, dict]:
    written = recent_points_json(run_id, points_per_key)
    if written is None:
        snapshot = run_snapshot(run_id, points_per_key)
        return json.dumps(snapshot), snapshot["cursor"]
    points, latest = written
    # the model holds no points (PostgreSQL wrote them as text): the stand-in takes their
    # place in the message, then their text takes the stand-in's
    snapshot = _snapshot(run_id, {}, latest).model_dump()
    snapshot["points"] = _POINTS_HERE
    text = json.dumps(snapshot).replace(json.dumps(_POINTS_HERE), points, 1)
    return text, snapshot["cursor"]


def _snapshot(run_id: int, points: dict[str, list[list]], latest: dict) -> SnapshotMessage:
    [run] = _RUN.rows([run_id]) or [None]
    if run is None:
        raise Run.DoesNotExist(f"run {run_id}")
    logs = _LOGS.rows([run_id])
    logs.reverse()
    samples = _SAMPLES.rows([run_id])
    samples.reverse()
    # validated from plain rows in one call: a third less CPU than a model built per row
    return SnapshotMessage.model_validate(
        {
            "run_id": run_id,
            "cursor": {"dispatch": run["last_dispatch"], "seq": run["last_seq"]},
            "run": {name: run[name] for name in RUN_FIELDS},
            "latest": latest,
            "points": points,
            "logs": [_log_fields(e) for e in logs],
            "samples": samples,  # (step, items) rows
        }
    )


def run_replay(run_id: int, after: tuple[int, int]) -> list[dict[str, Any]]:
    """Messages for everything stored after cursor `after`, oldest first, ending with the
    run's state. Steps are re-sent from the smallest step of the later batches, events
    after the last event the cursor's batch had seen. All as of one moment."""
    with one_moment():
        return _run_replay(run_id, after)


def _run_replay(run_id: int, after: tuple[int, int]) -> list[dict[str, Any]]:
    run = Run.objects.values(*STATE_COLUMNS).get(pk=run_id)
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
    state = state_message(run)
    cursor = state.cursor
    messages: list[BaseModel] = []
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
        steps = [MetricStep(step=s, **by_step[s]) for s in sorted(by_step)]
        messages.append(MetricsMessage(run_id=run_id, cursor=cursor, steps=steps))
    events = RunEvent.objects.filter(run_id=run_id, id__gt=seen or 0).order_by("id")
    for e in events.values("id", "time", "level", "message", "kind"):
        messages.append(LogMessage(run_id=run_id, cursor=cursor, **_log_fields(e)))
    messages.append(state)
    return [m.model_dump() for m in messages]


def experiment_run_ids(experiment_id: int) -> list[int]:
    return list(Run.objects.filter(experiment_id=experiment_id).values_list("id", flat=True))
