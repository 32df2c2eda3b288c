"""What the live stream does on the experiments app's events (experiments/hooks.py),
subscribed in LiveConfig.ready(): the run's viewers see every state and desired state."""

from __future__ import annotations

from paddock.experiments.hooks import Event, subscribe

from .broadcast import broadcast_state


def run_state_changed(run_id: int, state: str) -> None:
    broadcast_state(run_id)


def run_control_requested(run_id: int, desired_state: str) -> None:
    broadcast_state(run_id)  # viewers see the new desired state even before state moves


def connect() -> None:
    subscribe(Event.RUN_STATE_CHANGED, run_state_changed)
    subscribe(Event.RUN_CONTROL_REQUESTED, run_control_requested)
