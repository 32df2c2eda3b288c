"""What dispatch does on the experiments app's events (experiments/hooks.py), and what it
provides (the launch check, pooled runs' GPUs for quotas), connected in
ClustersConfig.ready()."""

from __future__ import annotations

from paddock.experiments.hooks import (
    Event,
    provide_launch_check,
    provide_pooled_gpus_correction,
    subscribe,
)

from .launch_checks import launch_check
from .pools import members_settle, pooled_gpus_correction
from .tasks import run_dispatch


def run_enqueued(run_id: int) -> None:
    run_dispatch.delay(run_id)


def run_control_requested(run_id: int, desired_state: str) -> None:
    if desired_state == "running":
        # a resume of a run that waits in queued (paused before it started) dispatches it
        run_dispatch.delay(run_id)


def run_state_changed(run_id: int, state: str) -> None:
    # a pooled run that stopped holding its job leaves its pool (audited); a no-op otherwise
    members_settle(run_id=run_id)


def connect() -> None:
    subscribe(Event.RUN_ENQUEUED, run_enqueued)
    subscribe(Event.RUN_CONTROL_REQUESTED, run_control_requested)
    subscribe(Event.RUN_STATE_CHANGED, run_state_changed)
    provide_launch_check(launch_check)
    provide_pooled_gpus_correction(pooled_gpus_correction)
