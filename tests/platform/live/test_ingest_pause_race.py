"""A pause asked for while the job takes its last steps: the job finishes before it sees the
pause and reports `succeeded` while the run is `pausing`. The run has succeeded (every step
is stored); it must not be left for reconcile to fail as a job that ended without a final
report and then re-run. (Found by the chaos run: a pause 2 s before a run's end cost it a
second dispatch.)"""

from __future__ import annotations

import pytest

from paddock.experiments.control import run_request_pause
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
