"""The run state machine (docs/architecture.md), in one place.

    queued → dispatching → starting → running ⇄ (pausing → paused → resuming)
                                       running → succeeded
       any active state → aborting → aborted
       any active state → failed   (retryable: → queued, from the last checkpoint)

Every change of `Run.state` goes through `run_transition`; nothing assigns it ad hoc.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from paddock.core.errors import DomainError, ErrorCode
from paddock.experiments import hooks
from paddock.experiments.models import DesiredState, Run, RunEvent
from paddock.experiments.models import RunState as S
from workers import names

TERMINAL = frozenset(S(state) for state in names.TERMINAL_RUN_STATES)
ACTIVE = frozenset(set(S) - TERMINAL)
# states in which a job may exist (or be about to): what counts against concurrency quotas
HOLDING = frozenset(ACTIVE - {S.QUEUED})

_ALLOWED: dict[S, frozenset[S]] = {
    S.QUEUED: frozenset({S.DISPATCHING, S.ABORTED}),  # nothing to stop before a dispatch
    # a job may report `running` before the dispatch task has recorded `starting`;
    # back to queued when no cluster takes it (the reason goes in queued_reason)
    S.DISPATCHING: frozenset({S.STARTING, S.RUNNING, S.QUEUED, S.ABORTED}),
    S.STARTING: frozenset({S.RUNNING}),
    S.RUNNING: frozenset({S.PAUSING, S.SUCCEEDED}),
    # pausing → succeeded: the job finished its last step before it saw the pause
    S.PAUSING: frozenset({S.PAUSED, S.SUCCEEDED}),
    # paused → queued: the job exited on pause (release_on_pause); resuming is a new dispatch
    S.PAUSED: frozenset({S.RESUMING, S.QUEUED}),
    # resuming → queued: the paused job is gone, so resume from the last checkpoint
    S.RESUMING: frozenset({S.RUNNING, S.QUEUED}),
    S.ABORTING: frozenset({S.ABORTED}),
    S.FAILED: frozenset({S.QUEUED}),  # a retry, while attempts remain
    S.SUCCEEDED: frozenset(),
    S.ABORTED: frozenset(),
}
for _state in ACTIVE - {S.ABORTING}:
    _ALLOWED[_state] = _ALLOWED[_state] | {S.ABORTING, S.FAILED}
_ALLOWED[S.ABORTING] = _ALLOWED[S.ABORTING] | {S.FAILED}


def transition_allowed(from_state: str, to_state: str) -> bool:
    return S(to_state) in _ALLOWED[S(from_state)]


def run_transition(
    *,
    run: Run,
    to_state: str,
    reason: str = "",
    error: str = "",
    dispatch: int | None = None,
) -> Run:
    """Move `run` to `to_state`, or raise DomainError(ErrorCode.ILLEGAL_TRANSITION) (409).

    Locks the row and checks against the stored state, not the caller's copy, so two
    writers (a Celery task and an ingest request) cannot both move it from the same state.
    Records a status RunEvent, stamps started/finished times, and after commit tells
    `hooks.run_state_changed`. `reason` goes into `queued_reason` on → queued; `error`
    into `error` on → failed; `state_since` is stamped (the clock of the start deadline and
    of the abort grace). A failed run goes back to queued only while attempts remain.
    Updates `run` in place and returns it."""
    target = S(to_state)
    with transaction.atomic():
        current = Run.objects.select_for_update().get(pk=run.pk)
        if not transition_allowed(current.state, target):
            raise DomainError(
                ErrorCode.ILLEGAL_TRANSITION,
                f"a run cannot go from {current.state} to {target}",
                field="state",
            )
        if current.state == S.FAILED and current.attempts >= current.max_attempts:
            raise DomainError(
                ErrorCode.ATTEMPTS_EXHAUSTED,
                f"run {run.pk} has used its {current.max_attempts} attempts",
            )
        now = timezone.now()
        changes: dict = {"state": target, "updated_at": now, "state_since": now}
        if target == S.QUEUED:
            changes["queued_reason"] = reason
        else:
            changes["queued_reason"] = ""
        if target == S.RUNNING and current.started_at is None:
            changes["started_at"] = now
        if target in TERMINAL:
            changes["finished_at"] = now
        if target == S.FAILED:
            changes["error"] = error or reason
        Run.objects.filter(pk=run.pk).update(**changes)
        message = f"{current.state} → {target}" + (
            f": {reason or error}" if reason or error else ""
        )
        RunEvent.objects.create(
            run_id=run.pk,
            dispatch=current.dispatch_count if dispatch is None else dispatch,
            kind=RunEvent.Kind.STATUS,
            level="error" if target == S.FAILED else "info",
            message=message,
            time=now,
        )
        for name, value in changes.items():
            setattr(run, name, value)
        run_id, state = run.pk, str(target)
        transaction.on_commit(lambda: hooks.run_state_changed(run_id, state))
    return run


def run_fail(*, run: Run, error: str, retry_reason: str, dispatch: int | None = None) -> bool:
    """Fail the run and, while attempts remain and no abort was asked for, queue it again in
    the same transaction, so no reader (a viewer, the API, a test polling for a final state)
    sees a retried run as finally failed; its next dispatch resumes from the last checkpoint.
    Whoever saw the failure (reconcile: a job that ended without a word; ingest: a job that
    reported it) retries the same way. Returns whether the run was queued again."""
    with transaction.atomic():
        run_transition(run=run, to_state=S.FAILED, error=error, dispatch=dispatch)
        run.refresh_from_db()
        if run.attempts >= run.max_attempts or run.desired_state == DesiredState.ABORTED:
            return False
        run_transition(run=run, to_state=S.QUEUED, reason=f"retrying after: {retry_reason}")
        run_id = run.pk
        transaction.on_commit(lambda: hooks.run_enqueued(run_id))
        return True
