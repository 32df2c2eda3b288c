"""A job that reports `failed` itself (its rollout engine process died, say) is retried like
a job that crashed without a word: while attempts remain the run goes back to `queued` in
the same transaction and its next dispatch resumes from the last checkpoint; with none left,
or with an abort asked for, it stays failed. (Found by the chaos run: a kill -9 of an engine
process ended the run failed at its first of four attempts.)"""

from __future__ import annotations

import pytest

from paddock.experiments.control import run_request_abort
from paddock.experiments.models import Run, RunEvent
from tests.platform.live.test_ingest import job, post  # noqa: F401  (the module's fixture)

pytestmark = pytest.mark.django_db
DETAIL = "EngineProcessError: rollout engine process (torch) is gone (exit code -9)\nTraceback…"


def _report(client, run, token, *states):
    for seq, (state, detail) in enumerate(states, start=1):
        reply = post(client, run, token, {"dispatch": 1, "seq": seq, "events": [
            {"type": "status", "state": state, "detail": detail}]})  # fmt: skip
        assert reply.status_code == 200, reply.content


def _with_attempts(run, attempts, max_attempts):
    Run.objects.filter(pk=run.pk).update(attempts=attempts, max_attempts=max_attempts)


def test_a_failure_the_job_reports_is_retried_while_attempts_remain(client, job):  # noqa: F811
    run, token = job
    _with_attempts(run, 1, 3)
    _report(client, run, token, ("running", ""), ("failed", DETAIL))
    run.refresh_from_db()
    assert run.state == "queued", run.error
    assert run.queued_reason.startswith("retrying after: the job failed: EngineProcessError")
    assert "exit code -9" in run.error  # the cause stays readable on the retried run
    moves = list(RunEvent.objects.filter(run=run, kind="status").values_list("message", flat=True))
    assert any(m.startswith("running → failed") for m in moves)
    assert any(m.startswith("failed → queued: retrying after") for m in moves)


def test_with_no_attempt_left_the_run_stays_failed(client, job):  # noqa: F811
    run, token = job
    _with_attempts(run, 3, 3)
    _report(client, run, token, ("running", ""), ("failed", DETAIL))
    run.refresh_from_db()
    assert run.state == "failed" and "exit code -9" in run.error


def test_a_run_being_aborted_is_not_retried(client, job, world):  # noqa: F811
    run, token = job
    _with_attempts(run, 1, 3)
    _report(client, run, token, ("running", ""))
    run_request_abort(actor=world.actor(world.users_a["member"]), run=run)
    post(client, run, token, {"dispatch": 1, "seq": 2, "events": [
        {"type": "status", "state": "failed", "detail": DETAIL}]})  # fmt: skip
    run.refresh_from_db()
    assert run.state == "failed"
