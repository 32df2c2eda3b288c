"""Where the experiments app hands over to the apps above it, without importing them.

The experiments app publishes five events, each from `transaction.on_commit` with ids only,
so a subscriber re-fetches what it needs and copes with a row that changed or vanished
meanwhile. The apps that act on them subscribe in their `AppConfig.ready()`: clusters
dispatches (`run_enqueued`, a resume in `run_control_requested`), live broadcasts
(`run_state_changed`, `run_control_requested`, `run_alarms_changed`,
`run_reason_changed`); clusters also
provides the check of a launch against the registry (`launch_check`, which also says what
each run counts for at least in the team's GPUs) and what pooled runs count for in a team's
GPUs (`pooled_gpus_correction`). So experiments imports neither, and the apps' imports form
a DAG (tests/test_import_graph.py)."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from workers.spec import RunSpec


class Event(StrEnum):
    RUN_ENQUEUED = "run_enqueued"  # (run_id): a run entered `queued` by a launch or a retry
    RUN_STATE_CHANGED = "run_state_changed"  # (run_id, state): any transition of Run.state
    # (run_id, desired_state): a user asked for pause / resume / abort
    RUN_CONTROL_REQUESTED = "run_control_requested"
    # (run_id): an alarm of the run began or stopped firing, or was armed (experiments/alarms.py)
    RUN_ALARMS_CHANGED = "run_alarms_changed"
    # (run_id): what a queued run waits for changed (its pre-flight check: experiments/preflight.py)
    RUN_REASON_CHANGED = "run_reason_changed"


_subscribers: dict[Event, list[Callable[..., None]]] = {event: [] for event in Event}


def subscribe(event: Event, receiver: Callable[..., None]) -> None:
    """Call `receiver` on each `event`, with the event's arguments (idempotent: a receiver
    subscribed twice, as a re-run `ready()` would, is called once)."""
    if receiver not in _subscribers[event]:
        _subscribers[event].append(receiver)


def _publish(event: Event, *args) -> None:
    for receiver in _subscribers[event]:
        receiver(*args)


def run_enqueued(run_id: int) -> None:
    """A run entered `queued`: dispatch should try to start it."""
    _publish(Event.RUN_ENQUEUED, run_id)


def run_state_changed(run_id: int, state: str) -> None:
    """`Run.state` changed: the run's viewers should see it."""
    _publish(Event.RUN_STATE_CHANGED, run_id, state)


def run_control_requested(run_id: int, desired_state: str) -> None:
    """A user asked for pause / resume / abort: `Run.desired_state` changed. The job learns
    it from its next ingest reply; viewers should see it before the state moves, and a
    resume of a run waiting in queued (paused before it started) should dispatch it."""
    _publish(Event.RUN_CONTROL_REQUESTED, run_id, desired_state)


def run_reason_changed(run_id: int) -> None:
    """What the queued run waits for changed: its viewers should see why."""
    _publish(Event.RUN_REASON_CHANGED, run_id)


def run_alarms_changed(run_id: int) -> None:
    """The run's alarms changed: its viewers should see them."""
    _publish(Event.RUN_ALARMS_CHANGED, run_id)


# One provider rather than subscribers: a launch asks the clusters app whether its runs can
# go anywhere (backends advertised, resources placeable), and must not launch unchecked.
_launch_check: Callable[..., list[float]] | None = None


def provide_launch_check(check: Callable[..., list[float]]) -> None:
    global _launch_check
    _launch_check = check


def launch_check(
    *, team_id: int, cluster_id: int | None, runs: list[tuple[str, RunSpec]]
) -> list[float]:
    """Raise DomainError unless the runs, (backend, effective spec) each, can be placed on a
    cluster the team may use (the one named by `cluster_id`, if any). Returns the least GPUs
    each run can count for in the team's usage: its ask, or a pooled run's least share of
    its pool's GPUs (docs/pools.md, "Quotas")."""
    if _launch_check is None:
        raise RuntimeError("no launch check: paddock.clusters is not an installed app")
    return _launch_check(team_id=team_id, cluster_id=cluster_id, runs=runs)


# The GPUs a team's pooled runs count for are their shares of their pools' GPUs, which only
# the clusters app knows (docs/pools.md, "Quotas"): team_usage adds what it provides.
_pooled_gpus_correction: Callable[..., float] | None = None


def provide_pooled_gpus_correction(correction: Callable[..., float]) -> None:
    global _pooled_gpus_correction
    _pooled_gpus_correction = correction


def pooled_gpus_correction(*, team_id: int) -> float:
    """What to add to the GPUs the team's holding runs ask for so that each pooled run
    counts as its share of its pool's GPUs; 0 without the clusters app (no pools)."""
    if _pooled_gpus_correction is None:
        return 0.0
    return _pooled_gpus_correction(team_id=team_id)
