"""The ingest endpoint, exactly as docs/ingest-protocol.md describes it."""

from __future__ import annotations

import pytest
from django.conf import settings

from paddock.experiments.models import IngestBatch, MetricPoint, Run, RunEvent, SampleSet
from paddock.experiments.states import run_transition
from paddock.experiments.tokens import run_token_mint
from paddock.teams.models import Role

pytestmark = pytest.mark.django_db
STORE = settings.PADDOCK_ARTIFACTS_URI.rstrip("/")


@pytest.fixture
def job(launched, django_capture_on_commit_callbacks):
    """Run 1 of team A's experiment, dispatched (dispatch 1) and running, with its token."""
    run = Run.objects.get(pk=launched[0]["runs"][0]["id"])
    Run.objects.filter(pk=run.pk).update(dispatch_count=1)
    run_transition(run=run, to_state="dispatching")
    token = run_token_mint(run=run, dispatch=1)
    return run, token


def post(client, run, token, body, **extra):
    return client.post(
        f"/api/v1/runs/{run.pk}/ingest", body, content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}", **extra,
    )  # fmt: skip


def metric(step, **values):
    return {"type": "metric", "step": step, "time": 1764490000.0 + step, "values": values}


def test_a_batch_is_stored_and_acknowledged_with_the_desired_state(client, job):
    run, token = job
    body = {"dispatch": 1, "seq": 1, "events": [
        {"type": "status", "state": "running", "detail": "started", "total_steps": 20},
        metric(1, **{"reward/mean": 0.25, "kl": 0.01}),
        metric(2, **{"reward/mean": 0.5}),
        {"type": "log", "time": 1764490000.5, "level": "info", "message": "hello"},
        {"type": "checkpoint", "step": 2, "uri": f"{STORE}/runs/{run.pk}/ck/2",
         "adapter_version": 2, "size": 123456},
        {"type": "samples", "step": 2, "items": [{"prompt": "1+1=", "completion": "2",
                                                   "reward": 1.0, "advantage": 0.5}]},
    ]}  # fmt: skip
    reply = post(client, run, token, body)
    assert reply.status_code == 200, reply.json()
    assert reply.json() == {"ack": 1, "desired_state": "running"}
    points = dict(
        ((k, s), v) for k, s, v in MetricPoint.objects.values_list("key", "step", "value")
    )
    assert points == {("reward/mean", 1): 0.25, ("kl", 1): 0.01, ("reward/mean", 2): 0.5}
    run.refresh_from_db()
    assert (run.state, run.step, run.total_steps, run.last_seq) == ("running", 2, 20, 1)
    assert (run.checkpoints.get().uri, run.checkpoints.get().size_bytes) == (
        f"{STORE}/runs/{run.pk}/ck/2",
        123456,
    )
    assert SampleSet.objects.get(run=run).items[0]["completion"] == "2"
    assert RunEvent.objects.filter(run=run, kind="log", message="hello").exists()


def test_a_checkpoints_size_reaches_the_api(client, client_as, world, job):
    run, token = job
    event = {"type": "checkpoint", "step": 3, "uri": f"{STORE}/runs/{run.pk}/ck/3",
             "adapter_version": 3, "size": 98765}  # fmt: skip
    assert post(client, run, token, {"dispatch": 1, "seq": 1, "events": [event]}).status_code == 200
    member = client_as(world.users_a[Role.VIEWER])
    listed = member.get(f"/api/v1/runs/{run.pk}/checkpoints").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [(c["step"], c["size_bytes"]) for c in rows] == [(3, 98765)]


def test_a_retried_batch_is_acknowledged_without_storing_again(client, job):
    run, token = job
    body = {"dispatch": 1, "seq": 7, "events": [metric(1, loss=1.0)]}
    assert post(client, run, token, body).json()["ack"] == 7
    body["events"][0]["values"]["loss"] = 99.0  # a retry must not overwrite either
    again = post(client, run, token, body)
    assert again.status_code == 200 and again.json()["ack"] == 7
    assert IngestBatch.objects.filter(run=run).count() == 1
    assert MetricPoint.objects.get(run=run, key="loss").value == 1.0


def test_the_final_batch_retried_after_the_run_finished_still_gets_its_ack(client, job):
    run, token = job
    final = {"dispatch": 1, "seq": 3, "events": [
        {"type": "status", "state": "running"}, metric(5, loss=0.1),
        {"type": "status", "state": "succeeded", "detail": "done"},
    ]}  # fmt: skip
    assert post(client, run, token, final).status_code == 200
    run.refresh_from_db()
    assert run.state == "succeeded"
    assert post(client, run, token, final).json() == {"ack": 3, "desired_state": "running"}
    late = post(client, run, token, {"dispatch": 1, "seq": 4, "events": [metric(6, loss=0)]})
    assert late.status_code == 409 and late.json()["code"] == "run_finished"


def test_a_step_re_emitted_by_a_later_dispatch_replaces_the_value(client, job):
    run, token = job
    post(client, run, token, {"dispatch": 1, "seq": 1, "events": [metric(3, loss=0.9)]})
    Run.objects.filter(pk=run.pk).update(dispatch_count=2)
    token2 = run_token_mint(run=run, dispatch=2)
    reply = post(client, run, token2, {"dispatch": 2, "seq": 1, "events": [metric(3, loss=0.4)]})
    assert reply.status_code == 200
    assert MetricPoint.objects.get(run=run, key="loss", step=3).value == 0.4
    # the superseded dispatch may not write any more
    stale = post(client, run, token, {"dispatch": 1, "seq": 2, "events": [metric(4, loss=1)]})
    assert stale.status_code == 409 and stale.json()["code"] == "dispatch_superseded"


def test_credentials_are_checked(client, job, launched):
    run, token = job
    body = {"dispatch": 1, "seq": 1, "events": [metric(1, loss=1)]}
    assert post(client, run, "pdr_wrong", body).status_code == 401
    other = Run.objects.get(pk=launched[0]["runs"][1]["id"])
    assert post(client, other, token, body).status_code == 401  # another run's token
    mismatch = post(client, run, token, {**body, "dispatch": 2})
    assert mismatch.status_code == 403 and mismatch.json()["field"] == "dispatch"
    bare = client.post(f"/api/v1/runs/{run.pk}/ingest", body, content_type="application/json")
    assert bare.status_code == 401
    assert MetricPoint.objects.count() == 0


def test_bad_input_is_a_4xx_naming_the_field_and_stores_nothing(client, job):
    run, token = job
    bad = {"dispatch": 1, "seq": 1, "events": [metric(1, loss=1), {"type": "metric", "step": -1,
           "time": 0, "values": {}}]}  # fmt: skip
    reply = post(client, run, token, bad)
    assert reply.status_code == 400
    assert reply.json()["code"] == "invalid_batch"
    assert reply.json()["field"].startswith("events.1")
    unknown = post(client, run, token, {"dispatch": 1, "seq": 1, "events": [{"type": "x"}]})
    assert unknown.status_code == 400
    garbage = client.post(
        f"/api/v1/runs/{run.pk}/ingest", b"{not json", content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip
    assert garbage.status_code == 400 and garbage.json()["code"] == "invalid_json"
    assert MetricPoint.objects.count() == 0 and IngestBatch.objects.count() == 0


def test_an_oversized_batch_gets_a_clear_413(client, job):
    run, token = job
    huge = {"dispatch": 1, "seq": 1, "events": [metric(1, x=1.0)], "pad": "x" * (9 << 20)}
    reply = post(client, run, token, huge)
    assert reply.status_code == 413
    assert reply.json()["code"] == "batch_too_large"
    assert "MiB" in reply.json()["message"]


def test_status_reports_walk_the_state_machine(client, job, world):
    from paddock.experiments.control import run_request_pause

    run, token = job
    post(client, run, token, {"dispatch": 1, "seq": 1, "events": [
        {"type": "status", "state": "running"}]})  # fmt: skip
    run.refresh_from_db()
    run_request_pause(actor=world.actor(world.users_a["member"]), run=run)
    beat = post(client, run, token, {"dispatch": 1, "seq": 1, "events": []})
    assert beat.json()["desired_state"] == "paused"  # the heartbeat carries the control
    post(client, run, token, {"dispatch": 1, "seq": 2, "events": [
        {"type": "status", "state": "paused", "detail": "checkpoint at step 3"}]})  # fmt: skip
    run.refresh_from_db()
    assert run.state == "paused"
    post(client, run, token, {"dispatch": 1, "seq": 3, "events": [
        {"type": "status", "state": "aborted"}]})  # fmt: skip
    run.refresh_from_db()
    assert run.state == "aborted"


def test_a_checkpoint_outside_the_artifact_store_is_refused(client, job):
    run, token = job
    other = run.pk + 1  # another run's folder (another team's, it may be)
    for uri in (
        "file:///etc/passwd",
        STORE + "/../../etc/passwd",
        f"{STORE}/runs/{other}/ck",
        f"{STORE}/runs/{run.pk}/../{other}/ck",
        f"{STORE}/runs/{run.pk}/ck?x",
    ):
        bad = {"dispatch": 1, "seq": 1, "events": [
            {"type": "checkpoint", "step": 1, "uri": uri, "adapter_version": 1}]}  # fmt: skip
        reply = post(client, run, token, bad)
        assert reply.status_code == 400 and reply.json()["field"] == "events.0.uri"
    assert not run.checkpoints.exists()
