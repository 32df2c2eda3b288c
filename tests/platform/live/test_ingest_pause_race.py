"""Pause and resume racing the job (both found by the chaos run).

A pause asked for while the job takes its last steps: the job finishes before it sees the
pause and reports `succeeded` while the run is `pausing`. The run has succeeded (every step
is stored); it must not be left for reconcile to fail as a job that ended without a final
report and then re-run (a pause 2 s before a run's end cost it a second dispatch).

A resume asked for while the run is still `pausing`: the run stayed `paused` for good while
its job went on and finished."""

from __future__ import annotations

import pytest

from paddock.experiments.control import run_request_pause, run_request_resume
from tests.platform.live.test_ingest import job, post  # noqa: F401  (the module's fixture)

pytestmark = pytest.mark.django_db


def test_a_job_that_finishes_while_the_run_is_pausing_succeeds(client, job, world):  # noqa: F811
    run, token = job
    post(client, run, token, {"dispatch": 1, "seq": 1, "events": [
        {"type": "status", "state": "running"}]})  # fmt: skip
    run_request_pause(actor=world.actor(world.users_a["member"]), run=run)
    run.refresh_from_db()
    assert run.state == "pausing"
    reply = post(client, run, token, {"dispatch": 1, "seq": 2, "events": [
        {"type": "status", "state": "succeeded"}]})  # fmt: skip
    assert reply.status_code == 200
    run.refresh_from_db()
    assert run.state == "succeeded" and run.finished_at is not None


def test_a_resume_asked_for_while_the_run_is_pausing_is_not_lost(client, job, world):  # noqa: F811
    """The resume lands while the run is still `pausing` (the job has not reported `paused`
    yet): the job reports `paused`, reads `running` in the reply and goes on, reporting
    `running`. The run must follow it (paused → resuming → running), not stay `paused` with
    a job that trains on and finishes unheard."""
    run, token = job
    member = world.actor(world.users_a["member"])
    post(client, run, token, {"dispatch": 1, "seq": 1, "events": [
        {"type": "status", "state": "running"}]})  # fmt: skip
    run_request_pause(actor=member, run=run)
    run_request_resume(actor=member, run=run)  # still pausing: the state waits for the job
    paused = post(client, run, token, {"dispatch": 1, "seq": 2, "events": [
        {"type": "status", "state": "paused", "detail": "checkpoint step-3"}]})  # fmt: skip
    assert paused.json()["desired_state"] == "running"  # so the job goes on
    post(client, run, token, {"dispatch": 1, "seq": 3, "events": [
        {"type": "status", "state": "running"}]})  # fmt: skip
    run.refresh_from_db()
    assert run.state == "running"
    post(client, run, token, {"dispatch": 1, "seq": 4, "events": [
        {"type": "status", "state": "succeeded"}]})  # fmt: skip
    run.refresh_from_db()
    assert run.state == "succeeded"
