"""What dispatch does on the experiments app's events (experiments/hooks.py), and the launch
check it provides, connected in ClustersConfig.ready()."""

from __future__ import annotations

from paddock.experiments.hooks import Event, provide_launch_check, subscribe

from .launch_checks import launch_check
from .tasks import run_dispatch


def run_enqueued(run_id: int) -> None:
    run_dispatch.delay(run_id)


def run_control_requested(run_id: int, desired_state: str) -> None:
    if desired_state == "running":
        # a resume of a run that waits in queued (paused before it started) dispatches it
        run_dispatch.delay(run_id)


def connect() -> None:
    subscribe(Event.RUN_ENQUEUED, run_enqueued)
    subscribe(Event.RUN_CONTROL_REQUESTED, run_control_requested)
    provide_launch_check(launch_check)
