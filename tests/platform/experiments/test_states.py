"""The run state machine: every legal move works, every other one raises."""

import pytest

from paddock.core.errors import DomainError
from paddock.experiments import hooks
from paddock.experiments.models import Run, RunEvent
from paddock.experiments.models import RunState as S
from paddock.experiments.states import ACTIVE, TERMINAL, run_transition, transition_allowed
from paddock.teams.models import Role

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quiet_hooks")]

HAPPY_PATH = [S.DISPATCHING, S.STARTING, S.RUNNING, S.PAUSING, S.PAUSED, S.RESUMING,
              S.RUNNING, S.SUCCEEDED]  # fmt: skip


@pytest.fixture
def run(launched) -> Run:
    return Run.objects.get(pk=launched[0]["runs"][0]["id"])


def test_the_lifecycle_of_design_md(run, django_capture_on_commit_callbacks, monkeypatch):
    seen = []
    monkeypatch.setattr(hooks, "run_state_changed", lambda run_id, state: seen.append(state))
    with django_capture_on_commit_callbacks(execute=True):
        for state in HAPPY_PATH:
            run_transition(run=run, to_state=state)
    run.refresh_from_db()
    assert run.state == S.SUCCEEDED
    assert run.started_at is not None and run.finished_at is not None
    assert seen == [str(s) for s in HAPPY_PATH]
    statuses = RunEvent.objects.filter(run=run, kind="status").count()
    assert statuses == len(HAPPY_PATH)


@pytest.mark.parametrize("state", sorted(ACTIVE))
def test_every_active_state_may_fail_and_abort(state):
    assert transition_allowed(state, S.FAILED)
    assert transition_allowed(state, S.ABORTING) or state == S.ABORTING


@pytest.mark.parametrize("state", sorted(TERMINAL - {S.FAILED}))
def test_finished_runs_stay_finished(state):
    assert not any(transition_allowed(state, to) for to in S)


def test_an_illegal_transition_raises_a_domain_error(run):
    with pytest.raises(DomainError) as err:
        run_transition(run=run, to_state=S.SUCCEEDED)  # queued → succeeded
    assert err.value.code == "illegal_transition"
    assert err.value.status == 409
    run.refresh_from_db()
    assert run.state == S.QUEUED


def test_the_stored_state_is_checked_not_the_callers_copy(run):
    stale = Run.objects.get(pk=run.pk)
    run_transition(run=run, to_state=S.DISPATCHING)
    run_transition(run=stale, to_state=S.ABORTING)  # stale says queued; the row dispatching
    with pytest.raises(DomainError):
        run_transition(run=Run.objects.get(pk=run.pk), to_state=S.STARTING)


def test_a_failed_run_retries_while_attempts_remain(run):
    run.attempts, run.max_attempts = 0, 1
    run.save()
    run_transition(run=run, to_state=S.DISPATCHING)
    run_transition(run=run, to_state=S.FAILED, error="job vanished")
    run.refresh_from_db()
    assert run.error == "job vanished" and run.finished_at is not None
    run_transition(run=run, to_state=S.QUEUED, reason="retry from the last checkpoint")
    assert Run.objects.get(pk=run.pk).queued_reason == "retry from the last checkpoint"
    Run.objects.filter(pk=run.pk).update(attempts=1)
    run_transition(run=run, to_state=S.DISPATCHING)
    run_transition(run=run, to_state=S.FAILED)
    with pytest.raises(DomainError) as err:
        run_transition(run=run, to_state=S.QUEUED)
    assert err.value.code == "attempts_exhausted"


def test_roles_constant_is_ordered():
    assert [r.rank for r in (Role.VIEWER, Role.MEMBER, Role.ADMIN, Role.OWNER)] == [0, 1, 2, 3]
