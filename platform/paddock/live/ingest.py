"""The ingest service: one batch of a job's events, stored atomically and idempotently.

Order of checks (DESIGN.md): the token, then the body's shape, then *duplicate first*: a
(dispatch, seq) already stored is acknowledged without storing again, even after the run
finished, so the retry of a final batch whose reply was lost still gets its ack. Only then
are new events for a finished run, or from a superseded dispatch, refused."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from pydantic import ValidationError

from paddock.api.errors import DomainError
from paddock.experiments.metrics import metric_points_store
from paddock.experiments.models import (
    Checkpoint,
    IngestBatch,
    Run,
    RunEvent,
)
from paddock.experiments.models import RunState as S
from paddock.experiments.states import TERMINAL, run_transition, transition_allowed
from paddock.experiments.tokens import run_token_verify

from .broadcast import broadcast_batch
from .ingest_schema import (
    CheckpointEvent,
    IngestBody,
    LogEvent,
    MetricEvent,
    SamplesEvent,
    StatusEvent,
)
from .models import BatchSummary, SampleSet

# The path a job's reported state takes through the state machine from each current state.
# A job that says "paused" while the run is still `running` (it paused on its own, e.g. a
# signal) walks running → pausing → paused; one that reports what is already true is a no-op.
_PATHS: dict[str, dict[str, list[str]]] = {
    "starting": {S.DISPATCHING: [S.STARTING]},
    "running": {S.DISPATCHING: [S.RUNNING], S.STARTING: [S.RUNNING], S.RESUMING: [S.RUNNING]},
    "paused": {S.RUNNING: [S.PAUSING, S.PAUSED], S.PAUSING: [S.PAUSED]},
    "succeeded": {S.RUNNING: [S.SUCCEEDED]},
    "aborted": {state: [S.ABORTING, S.ABORTED] for state in S if state not in TERMINAL}
    | {S.ABORTING: [S.ABORTED]},
    "failed": {state: [S.FAILED] for state in S if state not in TERMINAL},
}


@dataclass(frozen=True)
class IngestReply:
    ack: int
    desired_state: str
    duplicate: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"ack": self.ack, "desired_state": self.desired_state}


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
            "invalid_batch", f"{first['field']}: {first['message']}", field=first["field"],
            errors=errors[:20],
        ) from None  # fmt: skip


def _check_checkpoint_uris(batch: IngestBody) -> None:
    """A checkpoint must live in the artifact store: the platform serves downloads from the
    URIs it stores, so a job may not point it at any other file."""
    store = settings.PADDOCK_ARTIFACTS_URI.rstrip("/") + "/"
    for i, event in enumerate(batch.events):
        if isinstance(event, CheckpointEvent) and (
            not event.uri.startswith(store) or "/../" in event.uri
        ):
            raise DomainError(
                "invalid_batch", f"checkpoint URIs must be inside the artifact store {store}",
                field=f"events.{i}.uri",
            )  # fmt: skip


def _when(ts: float | None) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC) if ts is not None else datetime.now(tz=UTC)


def ingest_receive(*, run_id: int, raw_token: str, body: Any) -> IngestReply:
    token = run_token_verify(run_id=run_id, raw=raw_token)
    batch = _parse(body)
    if batch.dispatch != token.dispatch:
        raise DomainError(
            "dispatch_mismatch",
            f"this token belongs to dispatch {token.dispatch}, not {batch.dispatch}",
            field="dispatch", status=403,
        )  # fmt: skip
    _check_checkpoint_uris(batch)
    run = Run.objects.only("id", "state", "desired_state", "dispatch_count", "experiment_id").get(
        pk=run_id
    )
    seen = IngestBatch.objects.filter(run_id=run_id, dispatch=batch.dispatch, seq=batch.seq)
    # a heartbeat (no events) repeats the last acknowledged seq, so it is no retry: once the
    # run has ended it is refused like new events, and the token is good for nothing else
    if batch.events and seen.exists():
        return IngestReply(batch.seq, run.desired_state, duplicate=True)
    if run.state in TERMINAL:
        raise DomainError("run_finished", f"run {run_id} has finished ({run.state})", status=409)
    if not batch.events:  # a heartbeat: nothing to store, the reply carries the control
        return IngestReply(batch.seq, run.desired_state)
    if batch.dispatch < run.dispatch_count:
        raise DomainError(
            "dispatch_superseded",
            f"dispatch {batch.dispatch} was superseded by dispatch {run.dispatch_count}",
            field="dispatch", status=409,
        )  # fmt: skip
    try:
        with transaction.atomic():
            return _store(run, batch)
    except IntegrityError:
        # the same batch stored by a concurrent retry a moment ago
        if seen.exists():
            return IngestReply(batch.seq, Run.objects.get(pk=run_id).desired_state, True)
        raise


def _store(run: Run, batch: IngestBody) -> IngestReply:
    IngestBatch.objects.create(
        run_id=run.pk, dispatch=batch.dispatch, seq=batch.seq, events=len(batch.events)
    )
    metrics = [e for e in batch.events if isinstance(e, MetricEvent)]
    # a step re-emitted (by a later dispatch, after a resume) replaces the earlier value
    metric_points_store(
        run_id=run.pk,
        points=((key, e.step, e.time, value) for e in metrics for key, value in e.values.items()),
    )
    logs = [
        RunEvent(run_id=run.pk, dispatch=batch.dispatch, kind=RunEvent.Kind.LOG,
                 level=e.level, message=e.message, time=_when(e.time))
        for e in batch.events if isinstance(e, LogEvent)
    ]  # fmt: skip
    RunEvent.objects.bulk_create(logs)
    checkpoints = [e for e in batch.events if isinstance(e, CheckpointEvent)]
    for e in checkpoints:
        Checkpoint.objects.update_or_create(
            run_id=run.pk, step=e.step,
            defaults={"uri": e.uri, "adapter_version": e.adapter_version,
                      "size_bytes": e.size, "dispatch": batch.dispatch},
        )  # fmt: skip
    samples = [e for e in batch.events if isinstance(e, SamplesEvent)]
    SampleSet.objects.bulk_create(
        [SampleSet(run_id=run.pk, step=e.step, dispatch=batch.dispatch, items=e.items)
         for e in samples]
    )  # fmt: skip
    statuses = [e for e in batch.events if isinstance(e, StatusEvent)]
    for e in statuses:
        _follow_status(run, e, batch.dispatch)

    updates: dict[str, Any] = {"last_dispatch": batch.dispatch, "last_seq": batch.seq}
    max_step = max((e.step for e in metrics), default=None)
    if max_step is not None:
        updates["step"] = max_step
    totals = [e.total_steps for e in statuses if e.total_steps]
    if totals:
        updates["total_steps"] = totals[-1]
    Run.objects.filter(pk=run.pk).update(**updates)
    last_event = RunEvent.objects.filter(run_id=run.pk).aggregate(m=Max("id"))["m"] or 0
    BatchSummary.objects.create(
        run_id=run.pk, dispatch=batch.dispatch, seq=batch.seq,
        min_step=min((e.step for e in metrics), default=None), last_event_id=last_event,
    )  # fmt: skip
    # a status just moved the run, or a user's control landed meanwhile: answer the freshest
    desired = Run.objects.values_list("desired_state", flat=True).get(pk=run.pk)
    payload = _payload(run, batch, metrics, logs, samples, checkpoints)
    experiment_id = run.experiment_id
    transaction.on_commit(
        lambda: broadcast_batch(run_id=run.pk, experiment_id=experiment_id, payload=payload)
    )
    return IngestReply(batch.seq, desired)


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
        run_transition(
            run=run, to_state=step, reason=event.detail, dispatch=dispatch,
            error=event.detail if step == S.FAILED else "",
        )  # fmt: skip
        current = step


def _payload(run, batch, metrics, logs, samples, checkpoints) -> dict[str, Any]:
    cursor = {"dispatch": batch.dispatch, "seq": batch.seq}
    steps = [{"step": e.step, "time": e.time, "values": e.values} for e in metrics]
    # Encoded once here rather than once per viewer: with 5 viewers a run, the fan-out's JSON
    # encoding cost more than the whole ingest of the batch.
    metrics_text = (
        json.dumps({"type": "metrics", "run_id": run.pk, "cursor": cursor, "steps": steps})
        if steps
        else ""
    )
    return {
        "run_id": run.pk,
        "cursor": cursor,
        "metrics_text": metrics_text,
        "logs": [
            {"time": e.time.timestamp(), "level": e.level, "message": e.message} for e in logs
        ],
        "samples": [{"step": e.step, "items": e.items} for e in samples],
        "checkpoints": [
            {"step": e.step, "uri": e.uri, "adapter_version": e.adapter_version}
            for e in checkpoints
        ],
    }
