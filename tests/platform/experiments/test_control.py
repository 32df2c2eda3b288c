"""Pause / resume / abort: desired_state, the state move the platform knows, the hook."""

import pytest

from paddock.experiments import hooks
from paddock.experiments.models import Run
from paddock.experiments.states import run_transition
from paddock.teams.models import Role

pytestmark = pytest.mark.usefixtures("quiet_hooks")


@pytest.fixture
def run(launched) -> Run:
    return Run.objects.get(pk=launched[0]["runs"][0]["id"])


@pytest.fixture
def member(world, client_as):
    return client_as(world.users_a[Role.MEMBER])


def _running(run):
    for state in ("dispatching", "starting", "running"):
        run_transition(run=run, to_state=state)


def test_pause_resume_abort_of_a_running_run(run, member, monkeypatch,
                                             django_capture_on_commit_callbacks):  # fmt: skip
    asked = []
    monkeypatch.setattr(hooks, "run_control_requested", lambda i, d: asked.append((i, d)))
    _running(run)
    with django_capture_on_commit_callbacks(execute=True):
        paused = member.post(f"/api/v1/runs/{run.pk}/pause").json()
        assert (paused["state"], paused["desired_state"]) == ("pausing", "paused")
        run_transition(run=run, to_state="paused")  # the job's report
        resumed = member.post(f"/api/v1/runs/{run.pk}/resume").json()
        assert (resumed["state"], resumed["desired_state"]) == ("resuming", "running")
        run_transition(run=run, to_state="running")
        aborted = member.post(f"/api/v1/runs/{run.pk}/abort").json()
        assert (aborted["state"], aborted["desired_state"]) == ("aborting", "aborted")
    assert asked == [(run.pk, "paused"), (run.pk, "running"), (run.pk, "aborted")]


def test_aborting_a_queued_run_finishes_it_at_once(run, member):
    body = member.post(f"/api/v1/runs/{run.pk}/abort").json()
    assert body["state"] == "aborted" and body["finished_at"]
    again = member.post(f"/api/v1/runs/{run.pk}/abort")
    assert again.status_code == 409 and again.json()["code"] == "run_finished"


def test_abort_twice_is_harmless_but_resume_after_abort_is_refused(run, member):
    _running(run)
    assert member.post(f"/api/v1/runs/{run.pk}/abort").status_code == 200
    assert member.post(f"/api/v1/runs/{run.pk}/abort").status_code == 200
    reply = member.post(f"/api/v1/runs/{run.pk}/resume")
    assert (reply.status_code, reply.json()["code"]) == (409, "run_aborting")


def test_pausing_a_run_that_is_not_running_yet_only_records_the_wish(run, member):
    body = member.post(f"/api/v1/runs/{run.pk}/pause").json()
    assert (body["state"], body["desired_state"]) == ("queued", "paused")


def test_events_follow_after_an_id(run, member):
    _running(run)
    first = member.get(f"/api/v1/runs/{run.pk}/events", {"limit": 2}).json()
    assert [e["message"] for e in first["results"]] == ["queued → dispatching",
                                                        "dispatching → starting"]  # fmt: skip
    rest = member.get(f"/api/v1/runs/{run.pk}/events", {"after": first["last_id"]}).json()
    assert [e["message"] for e in rest["results"]] == ["starting → running"]
    empty = member.get(f"/api/v1/runs/{run.pk}/events", {"after": rest["last_id"]}).json()
    assert empty == {"results": [], "last_id": rest["last_id"], "next_before": None}
