"""Where the experiments app hands over to dispatch (clusters) and the live stream (live).

Each hook is called from `transaction.on_commit` with ids only, so the receiver re-fetches
what it needs and copes with a row that changed or vanished meanwhile. They are no-ops
until the dispatch and live work fill them in (e.g. `run_dispatch.delay(run_id)`)."""

from __future__ import annotations


def run_enqueued(run_id: int) -> None:
    """A run entered `queued` by a launch: dispatch should try to start it."""
    from paddock.clusters.tasks import run_dispatch

    run_dispatch.delay(run_id)


def run_state_changed(run_id: int, state: str) -> None:
    """`Run.state` changed (any transition): broadcast to the run's viewers."""
    from paddock.live.broadcast import broadcast_state

    broadcast_state(run_id)


def run_control_requested(run_id: int, desired_state: str) -> None:
    """A user asked for pause / resume / abort: `Run.desired_state` changed. The job learns
    it from its next ingest reply; dispatch may need to act (resume of a released run, a
    hard stop after the abort grace period)."""
    from paddock.live.broadcast import broadcast_state

    broadcast_state(run_id)  # viewers see the new desired state even before state moves
    if desired_state == "running":
        # a resume of a run that waits in queued (paused before it started) dispatches it
        from paddock.clusters.tasks import run_dispatch

        run_dispatch.delay(run_id)
