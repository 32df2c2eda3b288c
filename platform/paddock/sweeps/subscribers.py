"""What sweeps do on the experiments app's events (experiments/hooks.py), connected in
SweepsConfig.ready(): a member's run that changed state moves its sweep on (a slot freed,
a pause reached on the way to a stop)."""

from __future__ import annotations

from paddock.experiments.hooks import Event, subscribe

from .selectors import sweep_of_run
from .tasks import sweep_advance_task


def run_state_changed(run_id: int, state: str) -> None:
    sweep_id = sweep_of_run(run_id)
    if sweep_id is not None:
        sweep_advance_task.delay(sweep_id)


def connect() -> None:
    subscribe(Event.RUN_STATE_CHANGED, run_state_changed)
