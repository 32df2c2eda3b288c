"""Placement, the start deadline and abort against the session's real Ray head (2 CPUs, no
GPU): a launch it can never place is refused naming the setting; a run it cannot place now
waits in `queued` saying why; a run whose job stays PENDING fails at its start deadline
with the job stopped; an abort of a PENDING job reaches `aborted` and the job ends.

The platform's steps run in this process (the dispatch task, the reconciler's beat, the
health check), one call at a time, so each test is seconds long. A "blocker" Ray job holds
the head's free CPUs to make the cluster busy."""

from __future__ import annotations

import time
from contextlib import contextmanager
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from paddock.clusters.dispatch import cluster_resources_record, dispatch_prepare, dispatch_submit
from paddock.clusters.models import RayCluster
from paddock.clusters.tasks import (
    cluster_health,
    jobs_left_behind_stop,
    run_dispatch,
    run_reconcile,
)
from paddock.experiments.control import run_request_abort
from paddock.experiments.launch import experiment_launch
from paddock.experiments.models import Experiment, Run
from paddock.experiments.states import run_transition
from paddock.teams.access import actor_for
from paddock.teams.models import Role
from tests.conftest import wait_for
from tests.platform.conftest import launch
from tests.platform.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

ONE_CPU = {"resources": {"trainer_cpus": 1}, "train": {"steps": 3}}
ENDED = ("STOPPED", "FAILED", "SUCCEEDED")


@pytest.fixture
def placed(ray_head):
    team, user = TeamFactory(), UserFactory()
    MembershipFactory(team=team, user=user, role=Role.MEMBER)
    cluster = RayCluster.objects.create(
        name="local-test", address=ray_head["jobs_address"], backends=["torch"],
        labels={"embedded": True},
    )  # fmt: skip

    def observed():  # the health check reads its resources (a young head's once reported)
        assert cluster_health() == {"local-test": True}
        cluster.refresh_from_db()
        return cluster.resources.get("source") == "cluster_status"

    wait_for(observed, 60, "the health check to record the head's resources", interval=1)
    client = APIClient()
    client.force_login(user)
    return SimpleNamespace(team=team, actor=actor_for(user=user), cluster=cluster, client=client)


def _jobs():
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(RayCluster.objects.get(name="local-test").address)


def _status(sid: str) -> str:
    return str(getattr(s := _jobs().get_job_status(sid), "value", s))


def _free_cpus(cluster) -> float | None:
    """None until the head's monitor has reported its load (seconds after a start)."""
    snapshot = cluster_resources_record(cluster) or {}
    if snapshot.get("source") != "cluster_status":
        return None
    return sum(n["free"]["CPU"] for n in snapshot["nodes"])


@contextmanager
def cpus_taken(cluster):
    """A Ray job holding all the head's CPUs (once whatever else held some has let go),
    until the block ends."""
    total = sum(n["total"]["CPU"] for n in cluster.resources["nodes"])
    client = _jobs()
    sid = client.submit_job(entrypoint="sleep 300", entrypoint_num_cpus=total)
    try:
        wait_for(lambda: _status(sid) == "RUNNING", 60, "the blocker job to run")
        wait_for(lambda: _free_cpus(cluster) == 0, 30, "the cluster to report no CPU free")
        yield sid
    finally:
        client.stop_job(sid)
        wait_for(lambda: _status(sid) in ENDED, 30, "the blocker job to end")


def _launch(placed, spec=ONE_CPU, max_attempts=None) -> Run:
    result = experiment_launch(actor=placed.actor, team=placed.team, name="placement", spec=spec)
    run = Run.objects.get(experiment=result.experiment)
    if max_attempts is not None:
        Run.objects.filter(pk=run.pk).update(max_attempts=max_attempts)
        run.refresh_from_db()
    return run


def _starting_with_a_pending_job(placed, max_attempts=None):
    """Dispatch checked while the CPUs were free, submitted once a blocker holds them:
    the race that a check of a few seconds' old figures cannot rule out."""
    run = _launch(placed, max_attempts=max_attempts)
    # an earlier test's job may still be letting go of its CPU
    wait_for(lambda: (_free_cpus(placed.cluster) or 0) >= 1, 30, "a free CPU")
    order = dispatch_prepare(run_id=run.pk)
    run.refresh_from_db()
    assert order is not None, run.queued_reason
    return run, order


def test_a_launch_asking_for_more_than_the_cluster_has_is_refused_naming_the_setting(placed):
    totals = placed.cluster.resources["nodes"][0]["total"]
    assert (totals["CPU"], totals["GPU"]) == (2.0, 0.0)  # as the real head reports itself
    reply = launch(placed.client, placed.team, spec={"resources": {"trainer_gpus": 1}})
    assert reply.status_code == 400, reply.json()
    body = reply.json()
    assert (body["code"], body["field"]) == ("unplaceable", "spec.resources.trainer_gpus")
    assert body["message"] == (
        "resources.trainer_gpus: the cluster local-test has 0 GPUs (the run asks for 1 GPU)"
    )
    cpus = launch(placed.client, placed.team, spec={"resources": {"trainer_cpus": 3}}).json()
    assert cpus["field"] == "spec.resources.trainer_cpus"
    assert cpus["message"].startswith("resources.trainer_cpus: the cluster local-test has 2 CPUs")
    report = launch(placed.client, placed.team, validate_only=True,
                    spec={"resources": {"trainer_gpus": 1}}).json()  # fmt: skip
    assert report["valid"] is False
    assert report["errors"][0]["field"] == "spec.resources.trainer_gpus"
    assert not Experiment.objects.exists()
    fits = launch(placed.client, placed.team, spec={"resources": {"trainer_cpus": 2}})
    assert fits.status_code == 201, fits.json()


def test_a_run_the_cluster_cannot_place_now_waits_in_queued_saying_why(placed):
    with cpus_taken(placed.cluster):
        run = _launch(placed)
        assert run_dispatch(run.pk) == "waiting"
        run.refresh_from_db()
        assert (run.state, run.dispatch_count) == ("queued", 0)
        reason = "waiting for 1 CPU; the cluster local-test has 0 free"
        assert run.queued_reason == reason
        assert placed.client.get(f"/api/v1/runs/{run.pk}").json()["queued_reason"] == reason
    wait_for(lambda: (_free_cpus(placed.cluster) or 0) >= 1, 30, "the CPUs to be free again")
    order = dispatch_prepare(run_id=run.pk)  # what the next beat's dispatch does
    assert order is not None
    run.refresh_from_db()
    assert (run.state, run.queued_reason) == ("dispatching", "")


def test_runs_launched_together_do_not_all_take_the_same_free_cpus(placed):
    """The cluster's figures cannot show a job submitted a moment ago: dispatch counts the
    runs it sent since the figures were reported."""
    wait_for(lambda: (_free_cpus(placed.cluster) or 0) >= 2, 30, "both CPUs free")
    result = experiment_launch(actor=placed.actor, team=placed.team, name="two", seeds=2,
                               spec={"resources": {"trainer_cpus": 2}})  # fmt: skip
    first, second = Run.objects.filter(experiment=result.experiment).order_by("id")
    assert dispatch_prepare(run_id=first.pk) is not None
    assert dispatch_prepare(run_id=second.pk) is None
    second.refresh_from_db()
    assert second.state == "queued"
    assert second.queued_reason == "waiting for 2 CPUs; the cluster local-test has 0 free"


def test_a_run_still_starting_at_its_deadline_fails_and_its_job_is_stopped(placed, settings):
    settings.PADDOCK_START_TIMEOUT_S = 4
    run, order = _starting_with_a_pending_job(placed, max_attempts=1)
    with cpus_taken(placed.cluster):
        dispatch_submit(order)
        run.refresh_from_db()
        assert run.state == "starting" and _status(run.ray_submission_id) == "PENDING"
        run_reconcile()
        run.refresh_from_db()
        assert run.state == "starting"
        assert run.queued_reason == (
            "the Ray job is pending: waiting for 1 CPU; the cluster local-test has 0 free"
        )
        time.sleep(max(0.0, 4.2 - (time.time() - run.state_since.timestamp())))
        counts = run_reconcile()
        run.refresh_from_db()
        assert counts["timed_out"] == 1
        assert run.state == "failed"
        assert run.error.startswith("the run did not start within 4 s (PADDOCK_START_TIMEOUT_S)")
        assert "waiting for 1 CPU" in run.error and run.error.endswith("the job was stopped")
        run_reconcile()  # attempts are spent: no retry
        run.refresh_from_db()
        assert (run.state, run.dispatch_count) == ("failed", 1)
    # placed at last, the job meets its queued stop (or a bootstrap refused): it ends
    wait_for(lambda: _status(run.ray_submission_id) in ENDED, 60, "the stopped job to end")


def test_an_abort_of_a_pending_job_reaches_aborted_and_the_job_ends(placed):
    run, order = _starting_with_a_pending_job(placed)
    with cpus_taken(placed.cluster):
        dispatch_submit(order)
        run_request_abort(actor=placed.actor, run=run)
        run.refresh_from_db()
        assert run.state == "aborting"
        started = time.monotonic()
        counts = run_reconcile()  # one beat
        run.refresh_from_db()
        assert run.state == "aborted", run.state
        assert time.monotonic() - started < 10 and counts["stopped"] == 1
        assert "had not started" in run.events.order_by("-id").first().message
        assert _status(run.ray_submission_id) == "PENDING"  # Ray keeps it until placed
    wait_for(lambda: _status(run.ray_submission_id) in ENDED, 60, "the aborted job to end")


def test_a_job_left_behind_by_a_run_that_ended_is_stopped_by_the_health_check(placed):
    """A platform that died between a run's end and its job's stop (or a job placed long
    after): the health check's sweep stops this platform's jobs that no run needs."""
    run, order = _starting_with_a_pending_job(placed)
    with cpus_taken(placed.cluster):
        dispatch_submit(order)
        run_transition(run=run, to_state="aborting")
        run_transition(run=run, to_state="aborted", reason="as if the platform died here")
        Run.objects.filter(pk=run.pk).update(finished_at=run.finished_at - timedelta(minutes=1))
        sid = run.ray_submission_id
        foreign = _jobs().submit_job(entrypoint="sleep 300", metadata={"paddock": "1"})
        try:
            assert jobs_left_behind_stop(placed.cluster) == [sid]  # never another's job
        finally:
            _jobs().stop_job(foreign)
    wait_for(lambda: _status(sid) in ENDED, 60, "the job left behind to end")


def test_an_abort_that_the_running_job_ignores_is_finalised_within_its_bound(placed, settings):
    """A job that never reports `aborted` (here `sleep`, under the run's submission id) is
    stopped after the grace; the run is aborted at most ABORT_STOP_GRACE_S after that."""
    from paddock.clusters.tasks import ABORT_STOP_GRACE_S

    settings.PADDOCK_ABORT_GRACE_S = 1
    run, _ = _starting_with_a_pending_job(placed)
    sid = run.ray_submission_id
    _jobs().submit_job(entrypoint="sleep 300", submission_id=sid, entrypoint_num_cpus=0)
    wait_for(lambda: _status(sid) == "RUNNING", 60, "the job to run")
    run_transition(run=run, to_state="starting")
    run_transition(run=run, to_state="running")
    run_request_abort(actor=placed.actor, run=run)
    run_reconcile()  # within the grace: the job may still report `aborted` itself
    run.refresh_from_db()
    assert run.state == "aborting" and _status(sid) == "RUNNING"
    # a beat past the grace and the stop's own bound, the job still running (as when a
    # stop does not end it): stopped through the Jobs API, and the run aborted regardless
    past = timezone.now() - timedelta(seconds=1 + ABORT_STOP_GRACE_S + 1)
    Run.objects.filter(pk=run.pk).update(state_since=past)
    assert run_reconcile()["stopped"] == 1
    run.refresh_from_db()
    assert run.state == "aborted"
    last = run.events.order_by("-id").first().message
    assert last.endswith(f"its Ray job did not end within {ABORT_STOP_GRACE_S} s of the stop")
    wait_for(lambda: _status(sid) in ENDED, 30, "the job to end")
