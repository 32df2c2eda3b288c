"""Ingest and state changes → Channels groups. Called after commit, with ids and plain
data, from any process (the ASGI server, a Celery worker): the layer is Redis in both modes.

Group messages are high-level typed events: `run.state` is a `state` message of the client
protocol (docs/live-protocol.md, workers/live_messages.py) under its group type, `run.alarms`
an `alarms` message; `run.batch`
carries a batch's messages, built once here for every viewer (live/ingest.py), and its
cursor."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from paddock.experiments.alarms import alarm_rows, run_alarms
from paddock.experiments.models import Run
from workers.live_messages import AlarmsMessage, Cursor, StateMessage

from .access import session_mark
from .groups import ACCESS_GROUP, experiment_group, run_group

log = logging.getLogger(__name__)


async def _send_async(run_id: int, experiment_id: int, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    await layer.group_send(run_group(run_id), message)
    await layer.group_send(experiment_group(experiment_id), message)


def _send(run_id: int, experiment_id: int, message: dict[str, Any]) -> None:
    try:
        async_to_sync(_send_async)(run_id, experiment_id, message)
    except Exception:  # a broadcast is best effort: the data is stored, viewers can resync
        log.exception("broadcast of run %s failed", run_id)


def broadcast_batch(*, run_id: int, experiment_id: int, payload: dict[str, Any]) -> None:
    _send(run_id, experiment_id, {"type": "run.batch", **payload})


async def broadcast_batch_async(*, run_id: int, experiment_id: int, payload: dict[str, Any]):
    """`broadcast_batch` from the event loop itself (ingest_asgi.py), with no thread hop."""
    try:
        await _send_async(run_id, experiment_id, {"type": "run.batch", **payload})
    except Exception:  # best effort, as above
        log.exception("broadcast of run %s failed", run_id)


# the run's columns a `state` message is made of
STATE_COLUMNS = ("id", "state", "desired_state", "last_dispatch", "last_seq", "step",
                 "total_steps", "error", "queued_reason")  # fmt: skip


def state_message(run: dict[str, Any]) -> StateMessage:
    """The `state` message of a run's row (STATE_COLUMNS): its detail is the run's error
    when it failed, else its queue reason."""
    return StateMessage(
        run_id=run["id"],
        cursor=Cursor(dispatch=run["last_dispatch"], seq=run["last_seq"]),
        state=run["state"],
        desired_state=run["desired_state"],
        step=run["step"],
        total_steps=run["total_steps"],
        detail=run["error"] or run["queued_reason"],
    )


def broadcast_state(run_id: int) -> None:
    """The run's current state and desired state, re-read (it may have moved on)."""
    run = Run.objects.filter(pk=run_id).values("experiment_id", *STATE_COLUMNS).first()
    if run is None:
        return
    _send(run_id, run["experiment_id"], {**state_message(run).model_dump(), "type": "run.state"})


def broadcast_alarms(run_id: int) -> None:
    """The run's alarms, all of them, re-read (an `alarms` message)."""
    run = Run.objects.filter(pk=run_id).select_related("config").first()
    if run is None:
        return
    message = AlarmsMessage(
        run_id=run_id,
        cursor=Cursor(dispatch=run.last_dispatch, seq=run.last_seq),
        alarms=alarm_rows(run_alarms(run=run)),
    )
    _send(run_id, run.experiment_id, {**message.model_dump(), "type": "run.alarms"})


def broadcast_access_changed(
    *, token_ids: list[int], user_ids: list[int], session_keys: list[str]
) -> None:
    """Every stream hears it; those of these tokens, users or sessions re-check or close
    (live/access.py: access_change_applies). Sessions go out as their marks, never keys."""
    message = {"type": "access.changed", "tokens": token_ids, "users": user_ids,
               "sessions": [session_mark(key) for key in session_keys]}  # fmt: skip
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(ACCESS_GROUP, message)
    except Exception:  # best effort: the periodic re-check still closes the stream
        log.exception("broadcast of revoked access failed")
