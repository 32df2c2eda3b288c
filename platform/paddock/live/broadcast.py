"""Ingest and state changes → Channels groups. Called after commit, with ids and plain
data, from any process (the ASGI server, a Celery worker): the layer is Redis in both modes.

Group messages are high-level typed events (`run.batch`, `run.state`); consumers turn them
into the client protocol of docs/live-protocol.md."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from paddock.experiments.models import Run

from .groups import experiment_group, run_group

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


def broadcast_state(run_id: int) -> None:
    """The run's current state and desired state, re-read (it may have moved on)."""
    run = (
        Run.objects.filter(pk=run_id)
        .values("id", "experiment_id", "state", "desired_state", "last_dispatch", "last_seq",
                "step", "total_steps", "error", "queued_reason")
        .first()
    )  # fmt: skip
    if run is None:
        return
    detail = run["error"] or run["queued_reason"]
    message = {
        "type": "run.state",
        "run_id": run_id,
        "cursor": {"dispatch": run["last_dispatch"], "seq": run["last_seq"]},
        "state": run["state"],
        "desired_state": run["desired_state"],
        "step": run["step"],
        "total_steps": run["total_steps"],
        "detail": detail,
    }
    _send(run_id, run["experiment_id"], message)
