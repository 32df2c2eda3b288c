"""`run_on_ray`: the Ray executor of a run (`resources.executor: ray`).

A flat driver: join the cluster, start the fleet (placement group, trainer and rollout
actors), hand its proxies to the same `run_training` that `paddock train` runs, and tear the
fleet down. An actor that dies fails the run with an event naming it, or, while
`resources.max_restarts` allows, a fresh fleet resumes from the run's last checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path

import ray

from ..events import Event, LogEvent, StatusEvent
from ..grants import Grants
from ..loop.checkpoint import latest_checkpoint
from ..loop.control import ControlSource
from ..loop.driver import Outcome
from ..loop.events import EventHook, MetricsHook, early_log
from ..loop.setup import model_dir_for, run_training
from ..spec import RunSpec
from .fleet import ActorDied, Fleet
from .proxies import RayRolloutBackend, RayTrainerExecutor


def connect() -> bool:
    """Join the cluster of the Ray job this process runs in (RAY_ADDRESS, set by the job
    supervisor), else start a private local one, never another cluster found on the
    machine. True when this call started the connection (and should end it)."""
    if ray.is_initialized():
        return False
    ray.init(address=os.environ.get("RAY_ADDRESS") or "local", include_dashboard=False)
    return True


class _HoldFailure:
    """Passes events through, except a `failed` status, which waits until the run knows
    whether a restart follows: the platform treats `failed` as final."""

    def __init__(self, on_event: EventHook | None):
        self.on_event = on_event
        self.held: Event | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, StatusEvent) and event.state == "failed":
            self.held = event
        elif self.on_event is not None:
            self.on_event(event)

    def release(self) -> None:
        if self.held is not None and self.on_event is not None:
            self.on_event(self.held)
        self.held = None


async def run_on_ray(
    spec: RunSpec,
    out: Path,
    control: ControlSource | None = None,
    on_metrics: MetricsHook | None = None,
    on_event: EventHook | None = None,
    progress: bool = True,
    grants: Grants | None = None,
) -> Outcome:
    # a tiny model is built here first, its progress in the run's log (minutes for the
    # demos' chat models): the actors, on this machine, then find it built, where each
    # would otherwise build or wait in silence
    model_dir_for(spec, grants.paths if grants is not None else None, early_log(on_event, progress))
    started = connect()
    try:
        restarts, attempt_spec = 0, spec
        while True:
            events = _HoldFailure(on_event)
            fleet = Fleet.start(attempt_spec)
            try:
                return await run_training(
                    attempt_spec,
                    out,
                    control=control,
                    on_metrics=on_metrics,
                    on_event=events,
                    progress=progress,
                    executor=RayTrainerExecutor(fleet.trainers),
                    backend=RayRolloutBackend(fleet.rollouts, spec.rollout.backend),
                    grants=grants,
                )
            except ActorDied as exc:
                if restarts >= spec.resources.max_restarts:
                    events.release()
                    raise
                restarts += 1
                ckpt = latest_checkpoint(out / "checkpoints")
                src = str(ckpt) if ckpt else spec.checkpoint.resume_from
                events.held = None
                events(
                    LogEvent.now(
                        f"{exc}; restart {restarts} of {spec.resources.max_restarts} "
                        f"from {src or 'the start'}",
                        level="warning",
                    )
                )
                attempt_spec = spec.model_copy(
                    update={"checkpoint": spec.checkpoint.model_copy(update={"resume_from": src})}
                )
            except BaseException:
                events.release()
                raise
            finally:
                fleet.stop()
    finally:
        if started:
            ray.shutdown()
