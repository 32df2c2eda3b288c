"""Celery tasks of sweeps: one sweep's advance (after a member's run changed state), and the
beat's pass over every unfinished sweep (metrics for the early-stopping rule, GPU-hours,
launches the team's quota held back). Safe to run twice: an advance reads what is true."""

from __future__ import annotations

from celery import shared_task

from .controller import sweep_advance
from .selectors import sweeps_unfinished


@shared_task(acks_late=True)
def sweep_advance_task(sweep_id: int) -> str | None:
    sweep = sweep_advance(sweep_id=sweep_id)
    return None if sweep is None else sweep.state


@shared_task
def sweeps_tick() -> int:
    ids = sweeps_unfinished()
    for sweep_id in ids:
        sweep_advance(sweep_id=sweep_id)
    return len(ids)
