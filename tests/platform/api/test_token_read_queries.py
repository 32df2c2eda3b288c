"""What a program's reads cost with an API token (what bench/load/rest_ws.py loads): a fixed
number of queries per endpoint, however many rows there are, the token's check and the
actor's role in one of them; and that role is read on every request, so a role lowered or
a membership removed takes effect on the next one."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from paddock.experiments.metrics import metric_points_store
from paddock.experiments.models import Run
from paddock.teams.models import Membership, Role
from paddock.teams.services import api_token_create
from tests.platform.conftest import launch

# the token with its user and role (1), then each endpoint's own reads
READS = {
    "/api/v1/me": 2,  # + the teams
    "/api/v1/runs?limit=50": 3,  # + the page + the page's last values, one statement
    "/api/v1/runs/{run}": 4,  # + the run + its last values + its pool membership
    "/api/v1/runs/{run}/metrics?keys=a,b": 4,  # + the run + one statement per key
    "/api/v1/experiments": 3,  # + the page + the tags
}


def _bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def _count(client: APIClient, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        reply = client.get(url)
    assert reply.status_code == 200, reply.content[:300]
    return len(queries)


def _grow(world, session, times: int) -> None:
    for i in range(times):
        launch(session, world.team_a, backends=["torch", "vllm"], tags=[f"t{i}", "all"])
    for run in Run.objects.filter(team=world.team_a):
        points = [(key, s, 0.0, 1.0) for key in ("a", "b", "reward/mean") for s in range(20)]
        metric_points_store(run_id=run.pk, points=points)


@pytest.mark.parametrize("path", sorted(READS))
def test_a_token_read_costs_the_same_for_few_or_many_rows(world, client_as, path):
    member = world.users_a[Role.MEMBER]
    _, raw = api_token_create(actor=world.actor(member), team=world.team_a, name="bench")
    client, session = _bearer(raw), client_as(member)
    _grow(world, session, 1)
    run = Run.objects.filter(team=world.team_a).order_by("id").first()
    url = path.format(run=run.pk)
    client.get(url)  # the token's first use stamps last_used_at (once a minute at most)
    small = _count(client, url)
    _grow(world, session, 9)
    large = _count(client, url)
    assert small == large == READS[path], (small, large)


@pytest.mark.django_db
def test_a_lowered_role_or_a_removal_counts_from_the_next_request(world, client_as):
    member = world.users_a[Role.MEMBER]
    _, raw = api_token_create(actor=world.actor(member), team=world.team_a, name="ci")
    client = _bearer(raw)
    assert launch(client, world.team_a).status_code == 201  # a member may launch
    Membership.objects.filter(user=member, team=world.team_a).update(role=Role.VIEWER)
    refused = launch(client, world.team_a)
    assert refused.status_code == 403, refused.content
    assert client.get("/api/v1/me").json()["teams"][0]["role"] == Role.VIEWER
    Membership.objects.filter(user=member, team=world.team_a).delete()
    assert client.get("/api/v1/me").status_code == 401


@pytest.mark.django_db
def test_the_token_statement_reads_what_the_orm_reads(world):
    """The token check's hand-written statement (teams/services.py) gives the token and its
    user with every field as the ORM gives them: values and types (aware datetimes, bools)."""
    from paddock.teams.models import ApiToken
    from paddock.teams.services import api_token_authenticate

    member = world.users_a[Role.MEMBER]
    token, raw = api_token_create(actor=world.actor(member), team=world.team_a, name="same")
    read = api_token_authenticate(raw=raw)
    orm = ApiToken.objects.select_related("user").get(pk=token.pk)
    for got, want in ((read, orm), (read.user, orm.user)):
        for field in type(want)._meta.concrete_fields:
            mine, theirs = getattr(got, field.attname), getattr(want, field.attname)
            assert (mine, type(mine)) == (theirs, type(theirs)), field.name
    assert read.member_role == Role.MEMBER
