"""The read hot paths build their answers by hand from `.values()` rows (api/serializers:
run_rows, experiment_rows, me_answer; bench/load/rest_ws.py's endpoints): each answer must
equal, byte for byte, what the DRF serializer it stands in for writes for the same objects
(the serializers stay the schema's source)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest
from rest_framework.renderers import JSONRenderer

from paddock.api import serializers as s
from paddock.experiments import selectors
from paddock.experiments.metrics import metric_latest_annotations, metric_points_store
from paddock.experiments.models import Experiment, Run
from paddock.teams.models import Role
from paddock.teams.selectors import team_list
from paddock.teams.services import api_token_create
from tests.platform.conftest import launch


def _render(data) -> bytes:
    return JSONRenderer().render(data)


@pytest.fixture
def varied(world, client_as):
    """Team A's runs with what the hand-built rows must get right: a cluster and none, a
    creator and none, unset and set times (one in another zone), text beyond ASCII, last
    values present, absent and not finite; tags out of order."""
    session = client_as(world.users_a[Role.MEMBER])
    assert launch(session, world.team_a, backends=["torch", "vllm"],
                  tags=["zeta", "alpha"]).status_code == 201  # fmt: skip
    assert launch(session, world.team_a).status_code == 201
    first, second, third = Run.objects.filter(team=world.team_a).order_by("id")
    Experiment.objects.filter(pk=first.experiment_id).update(description="ünï\u2028côde")
    tz = timezone(timedelta(hours=5, minutes=30))
    Run.objects.filter(pk=first.pk).update(
        cluster=world.cluster, started_at=datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=tz),
        error="bröken \u2028 <b>", queued_reason="", gpus=1.5, step=7, last_seq=12,
    )  # fmt: skip
    Run.objects.filter(pk=second.pk).update(created_by=None, finished_at=datetime.now(tz))
    metric_points_store(run_id=first.pk, points=[
        ("reward/mean", 1, 0.0, 0.5), ("reward/mean", 2, 0.0, 0.75), ("kl", 3, 0.0, math.nan),
        ("accuracy", 1, 0.0, 1e-7), ("staleness/mean", 4, 0.0, math.inf), ("other", 9, 0, 3),
    ])  # fmt: skip
    metric_points_store(run_id=third.pk, points=[("eval/accuracy", 5, 0.0, -2.0)])
    token, raw = api_token_create(
        actor=world.actor(world.users_a[Role.MEMBER]), team=world.team_a, name="reads"
    )
    client = client_as(None)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client, world.actor(world.users_a[Role.MEMBER], token=token)


def _runs(actor):
    # the ORM path the answers were built by before: models, annotations, the serializer
    return (
        Run.objects.filter(team_id__in=actor.team_ids)
        .select_related("experiment", "created_by", "cluster")
        .annotate(**metric_latest_annotations())
        .order_by("-id")
    )


def test_the_run_list_equals_the_serializer(varied):
    client, actor = varied
    expected = {"next": None, "previous": None,
                "results": s.RunSerializer(_runs(actor), many=True).data}  # fmt: skip
    reply = client.get("/api/v1/runs")
    assert reply.status_code == 200
    assert reply.content == _render(expected)
    assert any(r["latest"] for r in reply.json()["results"])  # the values did come through


def test_a_paged_run_list_equals_the_serializer(varied):
    client, actor = varied
    first = client.get("/api/v1/runs?limit=2").json()
    rest = client.get(first["next"])
    assert rest.status_code == 200
    runs = list(_runs(actor))
    assert first["results"] == s.RunSerializer(runs[:2], many=True).data
    assert rest.json()["results"] == s.RunSerializer(runs[2:], many=True).data


def test_a_run_equals_the_detail_serializer(varied):
    client, actor = varied
    for run in _runs(actor):
        run.pool_info = None
        reply = client.get(f"/api/v1/runs/{run.pk}")
        assert reply.status_code == 200
        assert reply.content == _render(s.RunDetailSerializer(run).data)


def test_the_experiment_list_and_me_equal_their_serializers(varied):
    client, actor = varied
    experiments = selectors.experiment_list(actor=actor).order_by("-id")
    expected = {"next": None, "previous": None,
                "results": s.ExperimentSerializer(experiments, many=True).data}  # fmt: skip
    reply = client.get("/api/v1/experiments")
    assert reply.content == _render(expected)
    assert reply.json()["results"][-1]["tags"] == ["alpha", "zeta"]
    me = client.get("/api/v1/me")
    expected = s.MeSerializer(
        {"id": actor.user.pk, "username": actor.user.username, "is_staff": actor.user.is_staff,
         "teams": team_list(actor=actor), "token": actor.token.prefix},
        context={"actor": actor},
    ).data  # fmt: skip
    assert me.content == _render(expected)


def test_a_launchs_runs_equal_the_serializer(world, client_as):
    reply = launch(client_as(world.users_a[Role.MEMBER]), world.team_a, backends=["torch", "vllm"])
    assert reply.status_code == 201
    runs = Run.objects.filter(team=world.team_a).order_by("id")
    assert _render(reply.json()["runs"]) == _render(s.RunSerializer(runs, many=True).data)


def test_the_run_row_statement_equals_the_orm_values_row(varied, world, client_as):
    """run_row (a compiled statement) reads what `.values()` of run_list reads,
    value and type, for a run with a cluster and creator and one without; another team's
    run and a missing one are not found."""
    _, actor = varied
    for run in Run.objects.filter(team=world.team_a):
        orm = selectors.run_list(actor=actor).filter(pk=run.pk).values(*s.RUN_COLUMNS).first()
        fixed = selectors.run_row(actor=actor, run_id=run.pk, columns=s.RUN_COLUMNS)
        assert fixed == orm
        assert [type(v) for v in fixed.values()] == [type(v) for v in orm.values()]
    assert launch(client_as(world.users_b[Role.MEMBER]), world.team_b).status_code == 201
    theirs = Run.objects.get(team=world.team_b)
    assert selectors.run_row(actor=actor, run_id=theirs.pk, columns=s.RUN_COLUMNS) is None
    assert selectors.run_row(actor=actor, run_id=10**12, columns=s.RUN_COLUMNS) is None
