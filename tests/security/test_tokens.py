"""Credentials: hashed at rest, scoped to one run, dead once the run ends (but for the retry
of a batch already stored, and only for a grace), and the bootstrap token of a job's
environment (readable by other users of a shared Ray cluster through the Jobs API) good
exactly once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.apps import apps
from django.conf import settings
from django.utils import timezone

from paddock.clusters.bootstrap_tokens import bootstrap_token_for
from paddock.experiments.models import IngestBatch, MetricPoint, Run, RunToken
from paddock.experiments.states import run_transition
from paddock.experiments.tokens import run_token_mint
from paddock.teams.models import Role
from paddock.teams.services import api_token_create

pytestmark = pytest.mark.django_db


def _dispatched(launched, index=0, dispatch=1) -> Run:
    run = Run.objects.get(pk=launched[0]["runs"][index]["id"])
    Run.objects.filter(pk=run.pk).update(dispatch_count=dispatch)
    run.refresh_from_db()
    run_transition(run=run, to_state="dispatching")
    return run


def _ingest(client, run_id, token, body):
    return client.post(
        f"/api/v1/runs/{run_id}/ingest", body, content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip


def _bootstrap(client, run_id, token, dispatch):
    return client.post(
        f"/api/v1/runs/{run_id}/bootstrap", {"dispatch": dispatch},
        content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip


def _past_the_grace():
    return timezone.now() - timedelta(seconds=settings.PADDOCK_RUN_TOKEN_GRACE_S + 1)


def _metric(step):
    return {"type": "metric", "step": step, "time": 1764490000.0, "values": {"loss": 1.0}}


def test_no_secret_is_stored_in_clear_in_any_column(world, launched, client):
    run = _dispatched(launched)
    owner = world.users_a[Role.OWNER]
    secrets = [api_token_create(actor=world.actor(owner), team=world.team_a, name="t")[1]]
    secrets.append(run_token_mint(run=run, dispatch=1))
    reply = _bootstrap(client, run.pk, bootstrap_token_for(run_id=run.pk, dispatch=1), 1)
    assert reply.status_code == 200, reply.content
    secrets += [reply.json()["token"], bootstrap_token_for(run_id=run.pk, dispatch=1)]
    # the part after the public prefix, which is all an attacker would need
    tails = [s.split("_", 1)[1][-24:] for s in secrets]
    scanned = 0
    for model in apps.get_models():
        for row in model.objects.all().values():
            scanned += 1
            text = repr(row)
            leaked = [t for t in tails if t in text]
            assert not leaked, f"{model.__name__} holds a secret in clear: {row}"
    assert scanned > 20
    assert settings.SECRET_KEY not in repr(list(Run.objects.values()))


def test_a_run_token_stores_nothing_once_its_run_has_ended(client, launched):
    run = _dispatched(launched)
    token = run_token_mint(run=run, dispatch=1)
    ok = _ingest(client, run.pk, token, {"dispatch": 1, "seq": 1, "events": [_metric(1)]})
    assert ok.status_code == 200
    run_transition(run=run, to_state="failed", reason="test")
    late = _ingest(client, run.pk, token, {"dispatch": 1, "seq": 2, "events": [_metric(2)]})
    assert late.status_code == 409 and late.json()["code"] == "run_finished"
    # a retry of a batch already stored still gets its ack (DESIGN: duplicates first)
    retry = _ingest(client, run.pk, token, {"dispatch": 1, "seq": 1, "events": [_metric(1)]})
    assert retry.json()["ack"] == 1
    assert MetricPoint.objects.filter(run=run).count() == 1
    assert IngestBatch.objects.filter(run=run).count() == 1


def test_a_superseded_dispatch_token_stores_nothing(client, launched):
    run = _dispatched(launched)
    old = run_token_mint(run=run, dispatch=1)
    Run.objects.filter(pk=run.pk).update(dispatch_count=2)
    reply = _ingest(client, run.pk, old, {"dispatch": 1, "seq": 1, "events": [_metric(1)]})
    assert reply.status_code == 409 and reply.json()["code"] == "dispatch_superseded"
    assert not MetricPoint.objects.filter(run=run).exists()


def test_the_bootstrap_token_is_good_once_for_its_own_run_and_dispatch(client, launched):
    run = _dispatched(launched)
    other = _dispatched(launched, index=1)
    token = bootstrap_token_for(run_id=run.pk, dispatch=1)
    assert _bootstrap(client, other.pk, token, 1).status_code == 401  # another run
    assert _bootstrap(client, run.pk, token, 2).status_code == 401  # another dispatch
    first = _bootstrap(client, run.pk, token, 1)
    assert first.status_code == 200 and first.json()["token"].startswith("pdr_")
    # whoever read the job's environment through the Jobs API comes too late
    second = _bootstrap(client, run.pk, token, 1)
    assert second.status_code == 401 and second.json()["code"] == "token_spent"
    assert "token" not in second.json()
    body = {"dispatch": 1, "seq": 1, "events": []}
    assert _ingest(client, run.pk, first.json()["token"], body).status_code == 200
    assert _ingest(client, run.pk, token, body).status_code == 401  # not a run token


def test_a_bootstrap_token_of_a_superseded_dispatch_is_refused(client, launched):
    run = _dispatched(launched)
    token = bootstrap_token_for(run_id=run.pk, dispatch=1)
    Run.objects.filter(pk=run.pk).update(dispatch_count=2)
    reply = _bootstrap(client, run.pk, token, 1)
    assert reply.status_code == 409 and "token" not in reply.json()


def test_a_finished_runs_token_serves_only_the_retry_of_a_stored_batch(client, launched):
    run = _dispatched(launched)
    token = run_token_mint(run=run, dispatch=1)
    assert _ingest(client, run.pk, token, {"dispatch": 1, "seq": 1, "events": [_metric(1)]})\
        .json()["ack"] == 1  # fmt: skip
    beat = {"dispatch": 1, "seq": 1, "events": []}  # a heartbeat repeats the last acked seq
    assert _ingest(client, run.pk, token, beat).json()["desired_state"] == "running"
    run_transition(run=run, to_state="aborted", reason="test")
    # no more control to read: a heartbeat of the ended run is refused like new events
    for seq in (1, 0, 5):
        late = _ingest(client, run.pk, token, {"dispatch": 1, "seq": seq, "events": []})
        assert late.status_code == 409 and late.json()["code"] == "run_finished", seq
    retry = _ingest(client, run.pk, token, {"dispatch": 1, "seq": 1, "events": [_metric(1)]})
    assert retry.status_code == 200 and retry.json()["ack"] == 1


def test_a_finished_runs_token_is_revoked_after_the_grace(client, launched):
    run = _dispatched(launched)
    token = run_token_mint(run=run, dispatch=1)
    stored = {"dispatch": 1, "seq": 1, "events": [_metric(1)]}
    assert _ingest(client, run.pk, token, stored).status_code == 200
    run_transition(run=run, to_state="failed", reason="test")
    assert _ingest(client, run.pk, token, stored).json()["ack"] == 1  # within the grace
    Run.objects.filter(pk=run.pk).update(finished_at=_past_the_grace())
    dead = _ingest(client, run.pk, token, stored)
    assert dead.status_code == 401 and dead.json()["code"] == "token_revoked"
    assert RunToken.objects.get(run=run).revoked_at is not None  # and the row says so
    assert IngestBatch.objects.filter(run=run).count() == 1


def test_the_reconcile_beat_revokes_the_tokens_of_runs_ended_past_the_grace(launched):
    from paddock.clusters.tasks import run_reconcile

    old, recent = _dispatched(launched), _dispatched(launched, index=1)
    live = _dispatched((launched[1],))  # team B's run
    tokens = {run.pk: run_token_mint(run=run, dispatch=1) for run in (old, recent, live)}
    for run in (old, recent):
        run_transition(run=run, to_state="aborted", reason="test")
    Run.objects.filter(pk=old.pk).update(finished_at=_past_the_grace())
    assert run_reconcile()["tokens_revoked"] == 1
    rows = RunToken.objects.filter(run_id__in=tokens)
    revoked = {t.run_id: t.revoked_at is not None for t in rows}
    assert revoked == {old.pk: True, recent.pk: False, live.pk: False}
    assert run_reconcile()["tokens_revoked"] == 0  # once
