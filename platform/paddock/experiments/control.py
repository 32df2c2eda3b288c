"""Pause, resume and abort as users ask for them (REST and websocket alike).

A request sets `desired_state` (the job reads it from its next ingest reply) and, where
the platform itself knows the next state, moves `state` through `run_transition`:
running → pausing, paused → resuming, queued → aborted, any other active state → aborting.
The job's own status report completes the move (pausing → paused, aborting → aborted)."""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction

from paddock.core.errors import DomainError, ErrorCode
from paddock.experiments import hooks
from paddock.experiments.models import DesiredState, Run
from paddock.experiments.models import RunState as S
from paddock.experiments.preflight import preflight_refusal
from paddock.experiments.states import TERMINAL, run_transition
from paddock.teams.access import Actor
from paddock.teams.models import Role
from paddock.teams.services import audit_record
from workers.names import RUN_ACTIONS, names_check


def _pause_next(run: Run) -> S | None:
    return S.PAUSING if run.state == S.RUNNING else None


def _resume_next(run: Run) -> S | None:
    return S.RESUMING if run.state == S.PAUSED else None


def _abort_next(run: Run) -> S | None:
    if run.state == S.ABORTING:
        return None
    return S.ABORTED if run.state == S.QUEUED else S.ABORTING


def _control(
    *, actor: Actor | None, run: Run, action: str, desired: DesiredState, next_state: Callable,
    why: str = "",
) -> Run:  # fmt: skip
    # actor None: the platform itself asks (a sweep's early-stopping rule), with `why`
    if actor is not None:
        actor.require(run.team_id, Role.MEMBER, what="run")
    with transaction.atomic():
        current = Run.objects.select_for_update().get(pk=run.pk)
        if current.state in TERMINAL:
            raise DomainError(
                ErrorCode.RUN_FINISHED, f"run {run.pk} has finished ({current.state})"
            )
        if current.desired_state == DesiredState.ABORTED:
            if desired == DesiredState.ABORTED:
                return current  # asked twice: nothing changes, nothing to audit
            raise DomainError(ErrorCode.RUN_ABORTING, f"run {run.pk} is being aborted")
        before = current.state
        current.desired_state = desired
        current.save(update_fields=["desired_state", "updated_at"])
        to_state = next_state(current)
        if to_state is not None:
            reason = f"{action} requested" + (f": {why}" if why else "")
            run_transition(run=current, to_state=to_state, reason=reason)
        data = {"state": [before, current.state], "desired_state": desired}
        audit_record(
            actor=actor, team_id=run.team_id, action=f"run.{action}", target_type="run",
            target_id=run.pk, data={**data, "why": why} if why else data,
        )  # fmt: skip
        transaction.on_commit(lambda: hooks.run_control_requested(run.pk, str(desired)))
    return current


def run_request_pause(*, actor: Actor | None, run: Run, why: str = "") -> Run:
    """Ask a run to pause. A run not yet running keeps its state and pauses when it gets
    there (dispatch starts no job for a run whose desired state is paused). `actor` None:
    the platform asks, for the reason `why` (audited)."""
    return _control(
        actor=actor, run=run, action="pause", desired=DesiredState.PAUSED,
        next_state=_pause_next, why=why,
    )  # fmt: skip


def run_request_resume(*, actor: Actor, run: Run) -> Run:
    refusal = preflight_refusal(run)  # a run its experiment's pre-flight check holds
    if refusal is not None:
        actor.require(run.team_id, Role.MEMBER, what="run")
        raise refusal
    return _control(
        actor=actor,
        run=run,
        action="resume",
        desired=DesiredState.RUNNING,
        next_state=_resume_next,
    )


def run_request_abort(*, actor: Actor | None, run: Run, why: str = "") -> Run:
    return _control(
        actor=actor, run=run, action="abort", desired=DesiredState.ABORTED,
        next_state=_abort_next, why=why,
    )  # fmt: skip


RUN_CONTROLS = {
    "pause": run_request_pause,
    "resume": run_request_resume,
    "abort": run_request_abort,
}
names_check("run controls", RUN_CONTROLS, RUN_ACTIONS)
