"""Dispatch end to end with real parts: a Celery worker (with beat) on the Redis broker, a
local Ray head, uvicorn serving bootstrap and ingest, PostgreSQL; the job is the real
`python -m workers.job` training the tiny model."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paddock.clusters.models import RayCluster
from paddock.experiments.control import run_request_abort
from paddock.experiments.launch import experiment_launch
from paddock.experiments.models import MetricPoint, Run
from paddock.teams.access import actor_for
from paddock.teams.models import Role
from tests.conftest import REPO, AsgiServer, free_port, service_env, wait_for
from tests.platform.factories import MembershipFactory, TeamFactory, UserFactory
from workers.loop.checkpoint import checkpoint_bytes

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# small enough to build and train in seconds on 2 cores; a recipe of its own (cached)
FAST_SPEC = {
    "model": {"tiny": {"warmup_steps": 150}},
    "train": {"steps": 3, "prompts_per_step": 2, "eval_every": 0, "threads": 1},
    "algorithm": {"num_generations": 4},
    "rollout": {"max_new_tokens": 6},
}


@pytest.fixture(scope="module")
def stack(ray_head, django_db_setup, django_db_blocker):
    from django.conf import settings

    from paddock.celery import app

    db = str(settings.DATABASES["default"]["NAME"])
    server = AsgiServer(port=free_port(), env=service_env(PADDOCK_TEST_DB_NAME=db))
    server.start()
    app.control.purge()
    log = open(Path(os.environ["PADDOCK_HOME"]) / "dispatch-worker.log", "ab")
    state: dict = {"server": server, "ray": ray_head}

    def start_worker():
        state["worker"] = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "paddock", "worker", "--beat",
             "--loglevel=INFO", "--concurrency=1", "--pool=solo",
             f"--hostname=dispatch-{os.getpid()}-{time.monotonic_ns()}@%h",
             "--schedule", str(Path(os.environ["PADDOCK_HOME"]) / "beat-test-schedule")],
            env=service_env(PADDOCK_TEST_DB_NAME=db, PADDOCK_PUBLIC_URL=server.url),
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        wait_for(lambda: app.control.ping(timeout=0.5), 60, "the Celery worker")

    state["restart_worker"] = start_worker
    try:
        start_worker()
        yield state
    finally:
        worker = state["worker"]
        if worker.poll() is None:
            os.killpg(worker.pid, 15)
            worker.wait(timeout=30)
        log.close()
        server.stop()


def member_on_local_cluster(stack):
    """A team with a member, and the local Ray head registered as the shared cluster."""
    team = TeamFactory()
    user = UserFactory()
    MembershipFactory(team=team, user=user, role=Role.MEMBER)
    RayCluster.objects.update_or_create(
        name="test-local",
        defaults={"address": stack["ray"]["jobs_address"], "backends": ["torch"],
                  "labels": {"embedded": True}, "healthy": True},
    )  # fmt: skip
    return team, user


def _launch(stack, spec=FAST_SPEC, max_attempts=None):
    team, user = member_on_local_cluster(stack)
    actor = actor_for(user=user)
    result = experiment_launch(actor=actor, team=team, name="dispatch", spec=spec, seeds=1)
    run = Run.objects.get(experiment=result.experiment)
    if max_attempts is not None:
        Run.objects.filter(pk=run.pk).update(max_attempts=max_attempts)
    return actor, run


def _until(run, states, timeout=300):
    def check():
        run.refresh_from_db()
        return run.state in states

    wait_for(check, timeout, f"run {run.pk} to reach {states} (now {run.state})", 0.5)


def _status(job) -> str:
    return str(getattr(job.status, "value", job.status))


def _job_status(stack, run):
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(stack["ray"]["jobs_address"])
    return [j for j in client.list_jobs() if j.submission_id and
            j.submission_id.startswith(f"paddock-run-{run.pk}-")]  # fmt: skip


def test_launch_runs_a_ray_job_that_succeeds_and_reports(stack):
    _, run = _launch(stack)
    _until(run, {"succeeded", "failed"})
    assert run.state == "succeeded", run.error
    assert run.dispatch_count == 1
    assert run.ray_submission_id == f"paddock-run-{run.pk}-d1"
    wait_for(lambda: _status(_job_status(stack, run)[0]) != "RUNNING", 60, "the job to exit")
    assert [_status(j) for j in _job_status(stack, run)] == ["SUCCEEDED"]
    keys = set(MetricPoint.objects.filter(run=run).values_list("key", flat=True))
    assert {"reward/mean", "loss/policy", "adapter_version"} <= keys
    assert MetricPoint.objects.filter(run=run, key="reward/mean").count() == 3
    # the last checkpoint's size is what the job wrote to the artifact store
    last = run.checkpoints.order_by("-step").first()
    assert last is not None and last.size_bytes
    assert last.size_bytes == checkpoint_bytes(Path(last.uri.removeprefix("file://")))


def test_abort_stops_the_job(stack):
    spec = {**FAST_SPEC, "train": {**FAST_SPEC["train"], "steps": 500}}
    actor, run = _launch(stack, spec=spec)
    _until(run, {"running"}, timeout=240)
    run_request_abort(actor=actor, run=run)
    _until(run, {"aborted"}, timeout=90)
    ended = lambda: all(_status(j) not in ("RUNNING", "PENDING") for j in _job_status(stack, run))  # noqa: E731
    wait_for(ended, 60, "the job to end")
    assert MetricPoint.objects.filter(run=run).exists()


def test_a_job_killed_outside_paddock_fails_the_run_with_its_log_tail(stack):
    from ray.job_submission import JobSubmissionClient

    spec = {**FAST_SPEC, "train": {**FAST_SPEC["train"], "steps": 500}}
    _, run = _launch(stack, spec=spec, max_attempts=1)
    _until(run, {"running"}, timeout=240)
    JobSubmissionClient(stack["ray"]["jobs_address"]).stop_job(run.ray_submission_id)
    _until(run, {"failed"}, timeout=120)
    assert "ended STOPPED" in run.error
    assert "job log tail" in run.error
    time.sleep(4)  # a reconcile tick later: no retry, attempts are spent
    run.refresh_from_db()
    assert run.state == "failed" and run.dispatch_count == 1


@pytest.mark.parametrize("kill_after_s", [0.2, 0.7, 1.5])
def test_a_worker_killed_mid_dispatch_still_starts_exactly_one_job(stack, kill_after_s):
    """kill -9 of the Celery worker while run_dispatch is in flight, then a restart: the
    reconciler resubmits the same dispatch under the same submission id."""
    import signal

    worker = stack["worker"]
    _, run = _launch(stack)  # on commit: run_dispatch is queued and picked up at once
    time.sleep(kill_after_s)
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()
    stack["restart_worker"]()
    _until(run, {"running", "succeeded"}, timeout=240)
    time.sleep(3)  # a reconcile tick after the job started must not start another
    jobs = _job_status(stack, run)
    assert len(jobs) == 1, [j.submission_id for j in jobs]
    assert jobs[0].submission_id == f"paddock-run-{run.pk}-d1"
    run.refresh_from_db()
    assert run.dispatch_count == 1


def test_a_team_at_its_limit_queues_the_next_run_until_a_slot_frees(stack):
    from paddock.teams.models import TeamQuota

    team = TeamFactory()
    user = UserFactory()
    MembershipFactory(team=team, user=user, role=Role.MEMBER)
    TeamQuota.objects.update_or_create(team=team, defaults={"max_concurrent_runs": 1})
    RayCluster.objects.update_or_create(
        name="test-local",
        defaults={"address": stack["ray"]["jobs_address"], "backends": ["torch"],
                  "labels": {"embedded": True}, "healthy": True},
    )  # fmt: skip
    result = experiment_launch(
        actor=actor_for(user=user), team=team, name="quota", spec=FAST_SPEC, seeds=2
    )
    first, second = Run.objects.filter(experiment=result.experiment).order_by("id")

    def waiting():
        second.refresh_from_db()
        first.refresh_from_db()
        return first.state != "queued" and "concurrent runs" in second.queued_reason

    wait_for(waiting, 60, "the second run to wait for a slot, saying so")
    assert second.state == "queued"
    assert "the team runs 1 of 1 concurrent runs" in second.queued_reason
    _until(first, {"succeeded"})
    _until(second, {"succeeded"}, timeout=240)  # started by reconcile once the slot freed
    second.refresh_from_db()
    assert second.queued_reason == "" and second.dispatch_count == 1
