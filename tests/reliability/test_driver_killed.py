"""The Ray job's driver killed mid-run (kill -9 of `python -m workers.job`, the entrypoint
the Jobs API started), on the real stack of tests/integration/test_dispatch.py: a Celery
worker with beat, a local Ray head, uvicorn, PostgreSQL. The policy (clusters/tasks.py):
with attempts left the reconcile beat dispatches again and the job resumes from the run's
last checkpoint; with none left the run ends failed with its cause and the job's log tail.

Also checked on these real jobs: no run token is readable through the Jobs API (its job info
or its logs); the bootstrap token that is readable there is already spent."""

from __future__ import annotations

import re
import signal
import time

import psutil
import pytest
from rest_framework.test import APIClient

from paddock.experiments.models import Checkpoint, MetricPoint, RunEvent
from tests.conftest import wait_for
from tests.integration.test_dispatch import (
    FAST_SPEC,
    _job_status,
    _launch,
    _until,
    stack,  # noqa: F401  (the module's fixture)
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# long enough that the driver is killed well before its end, a checkpoint every few steps
SPEC = {**FAST_SPEC, "train": {**FAST_SPEC["train"], "steps": 40}, "checkpoint": {"every": 5}}


def _driver(run_id: int, dispatch: int) -> psutil.Process:
    """The job's driver: the python process of the entrypoint, told apart by the environment
    dispatch gave the job (not the `/bin/sh -c` around it, nor another run's job)."""

    def find():
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if "-m" not in cmdline or "workers.job" not in cmdline:
                continue
            try:
                env = proc.environ()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if (env.get("PADDOCK_RUN_ID"), env.get("PADDOCK_DISPATCH")) == (
                str(run_id),
                str(dispatch),
            ):
                return proc
        return None

    return wait_for(find, 60, f"the driver of run {run_id} dispatch {dispatch}")


def _reach(stack, run, states, timeout):  # noqa: F811
    """_until, and on a timeout the run's jobs and their log tails (what a CI log needs)."""
    try:
        _until(run, states, timeout=timeout)
    except TimeoutError as exc:
        from ray.job_submission import JobSubmissionClient

        client = JobSubmissionClient(stack["ray"]["jobs_address"])
        jobs = [f"{j.submission_id} {j.status} {j.message}\n"
                f"{client.get_job_logs(j.submission_id)[-3000:]}"
                for j in _job_status(stack, run)]  # fmt: skip
        raise AssertionError(f"{exc}; the run is {run.state}; jobs: {jobs}") from None


def _kill(proc: psutil.Process) -> float:
    killed_at = time.time()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    return killed_at


def _no_run_token_in_the_jobs_api(stack, run) -> None:  # noqa: F811
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(stack["ray"]["jobs_address"])
    for job in _job_status(stack, run):
        seen = repr(client.get_job_info(job.submission_id)) + client.get_job_logs(job.submission_id)
        assert "pdr_" not in seen, f"a run token is readable in {job.submission_id}"
        assert "pdb_" in seen  # the bootstrap token is (in the env), and it is spent:
        bootstrap = seen[seen.index("pdb_") :][:68]
        dispatch = int(job.submission_id.rsplit("-d", 1)[1])
        reply = APIClient().post(
            f"/api/v1/runs/{run.pk}/bootstrap", {"dispatch": dispatch}, format="json",
            HTTP_AUTHORIZATION=f"Bearer {bootstrap}",
        )  # fmt: skip
        assert reply.status_code in (401, 409) and "token" not in reply.json(), reply.json()


def test_driver_killed_with_no_attempt_left_fails_the_run_with_its_cause(stack):  # noqa: F811
    _, run = _launch(stack, spec=SPEC, max_attempts=1)
    _reach(stack, run, {"running"}, timeout=240)
    wait_for(lambda: MetricPoint.objects.filter(run=run).exists(), 120, "a first step")
    _kill(_driver(run.pk, 1))
    _reach(stack, run, {"failed", "succeeded"}, timeout=120)
    assert run.state == "failed"
    # the cause: Ray's word on the entrypoint, then the tail of the job's own log
    assert f"the Ray job paddock-run-{run.pk}-d1 ended FAILED" in run.error, run.error
    assert re.search(r"exit code (-9|137)\b", run.error), run.error  # SIGKILL, by itself or via sh
    tail = run.error.split("--- job log tail ---\n", 1)[1]
    assert "Running entrypoint for job" in tail and "Killed" in tail, tail[-800:]
    # visible on the run, to its team, through the API
    client = APIClient()
    client.force_authenticate(run.created_by)
    shown = client.get(f"/api/v1/runs/{run.pk}").json()
    assert shown["state"] == "failed" and "ended FAILED" in shown["error"]
    assert RunEvent.objects.filter(run=run, level="error", message__contains="ended FAILED")
    time.sleep(4)  # a reconcile tick later: no retry, its one attempt is spent
    run.refresh_from_db()
    assert run.state == "failed" and run.dispatch_count == 1
    _no_run_token_in_the_jobs_api(stack, run)


def test_driver_killed_with_attempts_left_resumes_from_the_last_checkpoint(stack):  # noqa: F811
    _, run = _launch(stack, spec=SPEC, max_attempts=2)

    def past_a_checkpoint():
        run.refresh_from_db()
        last = Checkpoint.objects.filter(run=run).order_by("-step").first()
        return last is not None and run.step > last.step

    driver = _driver(run.pk, 1)
    # Killed while frozen past a checkpoint: the driver is stopped (SIGSTOP: its reporter is
    # one of its threads), a request in flight then lands, and only if what is stored shows
    # steps past the last checkpoint is it killed; else it steps on to the next chance. A
    # kill timed on the run's step alone raced the next checkpoint (a fast run reached it
    # between the look and the kill, and left no step to re-run).
    while True:
        wait_for(past_a_checkpoint, 240, "a checkpoint and a step after it", 0.1)
        driver.send_signal(signal.SIGSTOP)
        time.sleep(1)  # a request in flight at the stop lands
        resumed = Checkpoint.objects.filter(run=run).order_by("-step").first()
        stored = MetricPoint.objects.filter(run=run, key="reward/mean").values_list(
            "step", flat=True
        )
        redone = [s for s in stored if s > resumed.step]
        if redone:  # dispatch 1 got past its checkpoint
            break
        driver.send_signal(signal.SIGCONT)
        wait_for(lambda at=run.step: run.refresh_from_db() or run.step > at, 60, "a step on", 0.1)
    killed_at = _kill(driver)
    _reach(stack, run, {"succeeded", "failed"}, timeout=300)
    assert run.state == "succeeded", run.error
    assert run.dispatch_count == 2 and run.attempts == 2
    statuses = {j.submission_id: str(getattr(j.status, "value", j.status))
                for j in _job_status(stack, run)}  # fmt: skip
    assert statuses[f"paddock-run-{run.pk}-d1"] == "FAILED"
    wait_for(lambda: _job_status(stack, run) and all(
        str(getattr(j.status, "value", j.status)) != "RUNNING" for j in _job_status(stack, run)
    ), 60, "the second job to exit")  # fmt: skip

    # dispatch 2 started from dispatch 1's last checkpoint, not from scratch
    where = resumed.uri.removeprefix("file://")  # the job's local path of the embedded store
    assert RunEvent.objects.filter(
        run=run, dispatch=2, message=f"dispatch 2: resuming from {where}"
    ).exists()
    points = {p.step: p for p in MetricPoint.objects.filter(run=run, key="reward/mean")}
    assert sorted(points) == list(range(1, 41))  # every step once: no duplicate, no gap
    before = [s for s in points if s <= resumed.step]
    after = [s for s in points if s > resumed.step]
    assert before and after
    assert all(points[s].time < killed_at for s in before)  # kept from dispatch 1
    assert all(points[s].time > killed_at for s in after)  # re-run by dispatch 2, replacing
    # the steps dispatch 1 had stored past its checkpoint are one row each now, dispatch 2's
    assert MetricPoint.objects.filter(run=run, key="reward/mean").count() == 40
    assert all(points[s].time > killed_at for s in redone) and run.step == 40
    _no_run_token_in_the_jobs_api(stack, run)
