"""The ingest service: one batch of a job's events, stored atomically and idempotently.

Order of checks: the token, then the body's shape, then *duplicate first*: a
(dispatch, seq) already stored is acknowledged without storing again, even after the run
finished, so the retry of a final batch whose reply was lost still gets its ack. Only then
are new events for a finished run, or from a superseded dispatch, refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from pydantic import ValidationError

from paddock.core.errors import DomainError, ErrorCode
from paddock.experiments.artifacts import run_artifact_allowed, run_folder_uri
from paddock.experiments.metrics import metric_points_store
from paddock.experiments.models import (
    Checkpoint,
    IngestBatch,
    Run,
    RunEvent,
    SampleSet,
)
from paddock.experiments.models import RunState as S
from paddock.experiments.preflight import run_verdict_store
from paddock.experiments.states import (
    TERMINAL,
    run_fail,
    run_transition,
    transition_allowed,
)
from paddock.experiments.tokens import run_token_verify
from paddock.monitoring.metrics import ingest_stored
from workers import events
from workers.events import (
    CheckpointEvent,
    IngestBody,
    LogEvent,
    MetricEvent,
    PreflightEvent,
    SamplesEvent,
    StatusEvent,
)
from workers.live_messages import (
    CheckpointMessage,
    Cursor,
    LogMessage,
    MetricsMessage,
    MetricStep,
    SamplesMessage,
)
from workers.names import REPORTED_STATES, names_check

from .broadcast import broadcast_batch
from .models import BatchSummary

# The path a job's reported state takes through the state machine from each current state.
# A job that says "paused" while the run is still `running` (it paused on its own, e.g. a
# signal) walks running → pausing → paused; one that reports what is already true is a no-op.
_PATHS: dict[str, dict[str, list[str]]] = {
    "starting": {S.DISPATCHING: [S.STARTING]},
    # paused: a resume came while the run was pausing, so the job paused and went on
    "running": {
        S.DISPATCHING: [S.RUNNING],
        S.STARTING: [S.RUNNING],
        S.RESUMING: [S.RUNNING],
        S.PAUSED: [S.RESUMING, S.RUNNING],
    },
    "paused": {S.RUNNING: [S.PAUSING, S.PAUSED], S.PAUSING: [S.PAUSED]},
    # pausing: the job took its last step before it saw the pause; the run is done
    "succeeded": {S.RUNNING: [S.SUCCEEDED], S.PAUSING: [S.SUCCEEDED]},
    "aborted": {state: [S.ABORTING, S.ABORTED] for state in S if state not in TERMINAL}
    | {S.ABORTING: [S.ABORTED]},
    "failed": {state: [S.FAILED] for state in S if state not in TERMINAL},
}
names_check("the states live/ingest.py follows", _PATHS, REPORTED_STATES)


@dataclass(frozen=True)
class IngestReply:
    ack: int
    desired_state: str
    duplicate: bool = False

    def as_dict(self) -> dict[str, Any]:
        return events.IngestReply(ack=self.ack, desired_state=self.desired_state).model_dump()


def _parse(body: Any) -> IngestBody:
    try:
        return IngestBody.model_validate(body)
    except ValidationError as exc:
        errors = [
            {"field": ".".join(str(p) for p in e["loc"]) or "(root)", "message": e["msg"]}
            for e in exc.errors()
        ]
        first = errors[0]
        raise DomainError(
            ErrorCode.INVALID_BATCH,
            f"{first['field']}: {first['message']}",
            field=first["field"],
            errors=errors[:20],
        ) from None


def _check_checkpoint_uris(batch: IngestBody, run_id: int) -> None:
    """A checkpoint must live in its own run's folder of the artifact store (resolved): the
    platform serves downloads from the URIs it stores, so a job may point it neither at any
    other file nor at another run's (another team's) checkpoint."""
    for i, event in enumerate(batch.events):
        if isinstance(event, CheckpointEvent) and not run_artifact_allowed(event.uri, run_id):
            raise DomainError(
                ErrorCode.INVALID_BATCH,
                f"checkpoint URIs must be inside the run's folder {run_folder_uri(run_id)}",
                field=f"events.{i}.uri",
            )


def _when(ts: float | None) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC) if ts is not None else datetime.now(tz=UTC)


@dataclass(frozen=True)
class _RunRow:
    id: int
    state: str
    desired_state: str
    dispatch_count: int
    experiment_id: int
    seen: bool  # this batch's (dispatch, seq) is already stored


_RUN_ROW = """SELECT r.state, r.desired_state, r.dispatch_count, r.experiment_id,
                     EXISTS (SELECT 1 FROM {batches} b
                             WHERE b.run_id = r.id AND b.dispatch = %s AND b.seq = %s)
              FROM {runs} r WHERE r.id = %s"""


def _run_row(run_id: int, batch: IngestBody) -> _RunRow:
    """The run's state and whether this batch is a duplicate, in one round trip: at tens of
    batches a second, each statement the hot path saves (its ORM compilation, its round
    trip, PostgreSQL's parse and plan) is a visible share of the server's CPU."""
    sql = _RUN_ROW.format(batches=IngestBatch._meta.db_table, runs=Run._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql, [batch.dispatch, batch.seq, run_id])
        row = cursor.fetchone()
    if row is None:  # the token was valid a moment ago: the run was deleted meanwhile
        raise DomainError(ErrorCode.NOT_FOUND, f"run {run_id} not found")
    return _RunRow(run_id, *row[:4], seen=bool(row[4]))


def ingest_receive(
    *, run_id: int, raw_token: str, body: Any, publish: Callable[..., None] = broadcast_batch
) -> IngestReply:
    """Store one batch (see the module's docstring for the order of checks); after commit,
    `publish(run_id=…, experiment_id=…, payload=…)` gets what viewers are sent."""
    token = run_token_verify(run_id=run_id, raw=raw_token)
    batch = _parse(body)
    if batch.dispatch != token.dispatch:
        raise DomainError(
            ErrorCode.DISPATCH_MISMATCH,
            f"this token belongs to dispatch {token.dispatch}, not {batch.dispatch}",
            field="dispatch",
        )
    _check_checkpoint_uris(batch, run_id)
    run = _run_row(run_id, batch)
    # a heartbeat (no events) repeats the last acknowledged seq, so it is no retry: once the
    # run has ended it is refused like new events, and the token is good for nothing else
    if batch.events and run.seen:
        return IngestReply(batch.seq, run.desired_state, duplicate=True)
    if run.state in TERMINAL:
        raise DomainError(ErrorCode.RUN_FINISHED, f"run {run_id} has finished ({run.state})")
    if not batch.events:  # a heartbeat: nothing to store, the reply carries the control
        return IngestReply(batch.seq, run.desired_state)
    if batch.dispatch < run.dispatch_count:
        raise DomainError(
            ErrorCode.DISPATCH_SUPERSEDED,
            f"dispatch {batch.dispatch} was superseded by dispatch {run.dispatch_count}",
            field="dispatch",
        )
    try:
        with transaction.atomic():
            return _store(run, batch, publish)
    except IntegrityError:
        # the same batch stored by a concurrent retry a moment ago
        again = _run_row(run_id, batch)
        if again.seen:
            return IngestReply(batch.seq, again.desired_state, True)
        raise


def _store(run: _RunRow, batch: IngestBody, publish: Callable[..., None]) -> IngestReply:
    metrics = [e for e in batch.events if isinstance(e, MetricEvent)]
    # a step re-emitted (by a later dispatch, after a resume) replaces the earlier value
    metric_points_store(
        run_id=run.id,
        points=((key, e.step, e.time, value) for e in metrics for key, value in e.values.items()),
    )
    logs = [
        RunEvent(run_id=run.id, dispatch=batch.dispatch, kind=RunEvent.Kind.LOG,
                 level=e.level, message=e.message, time=_when(e.time))
        for e in batch.events if isinstance(e, LogEvent)
    ]  # fmt: skip
    RunEvent.objects.bulk_create(logs)
    checkpoints = [e for e in batch.events if isinstance(e, CheckpointEvent)]
    for e in checkpoints:
        Checkpoint.objects.update_or_create(
            run_id=run.id, step=e.step,
            defaults={"uri": e.uri, "adapter_version": e.adapter_version,
                      "size_bytes": e.size, "dispatch": batch.dispatch},
        )  # fmt: skip
    for e in batch.events:
        if isinstance(e, PreflightEvent):  # a pre-flight run's verdict (experiments/preflight.py)
            run_verdict_store(run_id=run.id, verdict=e)
    samples = [e for e in batch.events if isinstance(e, SamplesEvent)]
    SampleSet.objects.bulk_create(
        [SampleSet(run_id=run.id, step=e.step, dispatch=batch.dispatch, items=e.items)
         for e in samples]
    )  # fmt: skip
    statuses = [e for e in batch.events if isinstance(e, StatusEvent)]
    if statuses:
        model = Run.objects.only("id", "state", "experiment_id").get(pk=run.id)
        for e in statuses:
            _follow_status(model, e, batch.dispatch)
    totals = [e.total_steps for e in statuses if e.total_steps]
    # a status just moved the run, or a user's control landed meanwhile: the reply carries
    # the freshest desired state, which _close reads back
    desired = _close(
        run.id, batch,
        step=max((e.step for e in metrics), default=None),
        min_step=min((e.step for e in metrics), default=None),
        total_steps=totals[-1] if totals else None,
    )  # fmt: skip
    payload = _payload(run.id, batch, metrics, logs, samples, checkpoints)
    experiment_id = run.experiment_id
    transaction.on_commit(
        lambda: publish(run_id=run.id, experiment_id=experiment_id, payload=payload)
    )
    points = sum(len(e.values) for e in metrics)
    transaction.on_commit(lambda: ingest_stored(points))  # Prometheus: points per second
    return IngestReply(batch.seq, desired)


def _close(
    run_id: int,
    batch: IngestBody,
    *,
    step: int | None,
    min_step: int | None,
    total_steps: int | None,
) -> str:
    """Mark (dispatch, seq) stored, record where the batch left the stream, move the run's
    cursor, and read back its desired state: three statements, plain SQL that PostgreSQL
    and SQLite both take. A concurrent copy of this batch fails on the first one (unique
    (run, dispatch, seq)), which rolls the whole batch back."""
    batches, summaries = IngestBatch._meta.db_table, BatchSummary._meta.db_table
    events, runs = RunEvent._meta.db_table, Run._meta.db_table
    now = connection.ops.adapt_datetimefield_value(datetime.now(tz=UTC))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {batches} (run_id, dispatch, seq, events, received_at) "
            "VALUES (%s, %s, %s, %s, %s)",
            [run_id, batch.dispatch, batch.seq, len(batch.events), now],
        )
        cursor.execute(
            f"INSERT INTO {summaries} (run_id, dispatch, seq, min_step, last_event_id) "
            f"SELECT %s, %s, %s, %s, COALESCE(MAX(id), 0) FROM {events} WHERE run_id = %s",
            [run_id, batch.dispatch, batch.seq, min_step, run_id],
        )
        cursor.execute(
            f"UPDATE {runs} SET last_dispatch = %s, last_seq = %s, "
            "step = COALESCE(%s, step), total_steps = COALESCE(%s, total_steps) "
            "WHERE id = %s RETURNING desired_state",
            [batch.dispatch, batch.seq, step, total_steps, run_id],
        )  # fmt: skip
        return cursor.fetchone()[0]


def _follow_status(run: Run, event: StatusEvent, dispatch: int) -> None:
    current = Run.objects.values_list("state", flat=True).get(pk=run.pk)
    path = _PATHS[event.state].get(current)
    if path is None:
        if current != event.state:
            RunEvent.objects.create(
                run_id=run.pk, dispatch=dispatch, kind=RunEvent.Kind.LOG, level="warning",
                message=f"job reported {event.state} while the run is {current}: ignored",
                time=_when(event.time),
            )  # fmt: skip
        return
    for step in path:
        if not transition_allowed(current, step):
            break
        if step == S.FAILED:  # retried while attempts remain, as a job that ended unheard
            cause = event.detail.strip().splitlines()[0][:200] if event.detail.strip() else ""
            retry = f"the job failed: {cause}" if cause else "the job failed"
            run_fail(run=run, error=event.detail, retry_reason=retry, dispatch=dispatch)
            return
        run_transition(run=run, to_state=step, reason=event.detail, dispatch=dispatch)
        current = step


def _payload(run_id, batch, metrics, logs, samples, checkpoints) -> dict[str, Any]:
    """The batch for its viewers (broadcast.py's `run.batch`): its messages built here once,
    not once per viewer, and the metrics message encoded too: with 5 viewers a run, the
    fan-out's JSON encoding cost more than the whole ingest of the batch."""
    cursor = Cursor(dispatch=batch.dispatch, seq=batch.seq)
    steps = [MetricStep(step=e.step, time=e.time, values=e.values) for e in metrics]
    metrics_text = (
        json.dumps(MetricsMessage(run_id=run_id, cursor=cursor, steps=steps).model_dump())
        if steps
        else ""
    )
    messages = [
        *(LogMessage(run_id=run_id, cursor=cursor, id=e.pk, time=e.time.timestamp(),
                     level=e.level, message=e.message, kind=e.kind) for e in logs),
        *(SamplesMessage(run_id=run_id, cursor=cursor, step=e.step, items=e.items)
          for e in samples),
        *(CheckpointMessage(run_id=run_id, cursor=cursor, step=e.step, uri=e.uri,
                            adapter_version=e.adapter_version) for e in checkpoints),
    ]  # fmt: skip
    return {
        "run_id": run_id,
        "cursor": cursor.model_dump(),
        "metrics_text": metrics_text,
        "messages": [m.model_dump() for m in messages],
    }
