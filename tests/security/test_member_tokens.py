"""A removed member's API tokens stop at removal, on every path that takes a token (REST,
websocket handshakes, an open stream), and stay dead when the member is added back: they
are revoked, whichever way the membership went (the API, the Django admin)."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from paddock.live import consumers
from paddock.teams.models import ApiToken, AuditEvent, Membership, Role
from paddock.teams.services import api_token_create
from tests.security.wsclient import Ws


def _bearer(client, raw: str, url: str = "/api/v1/me"):
    return client.get(url, HTTP_AUTHORIZATION=f"Bearer {raw}")


@pytest.mark.django_db
def test_a_removed_members_token_stops_and_stays_dead_when_re_added(world, client_as, client):
    member = world.users_a[Role.MEMBER]
    _, raw = api_token_create(actor=world.actor(member), team=world.team_a, name="laptop")
    assert _bearer(client, raw).status_code == 200
    admin = client_as(world.users_a[Role.ADMIN])
    team = world.team_a.pk
    assert admin.delete(f"/api/v1/teams/{team}/members/{member.pk}").status_code == 204
    for url in ("/api/v1/me", "/api/v1/experiments", f"/api/v1/teams/{team}"):
        assert _bearer(client, raw, url).status_code == 401, url
    token = ApiToken.objects.get(user=member, team_id=team)
    assert token.revoked_at is not None  # shows in the team's token list as revoked
    removal = AuditEvent.objects.get(action="member.remove")
    assert removal.data["tokens_revoked"] == 1
    added = admin.post(f"/api/v1/teams/{team}/members",
                       {"username": member.username, "role": "admin"}, format="json")  # fmt: skip
    assert added.status_code == 201
    assert _bearer(client, raw).status_code == 401  # not revived, at no role
    _, fresh = api_token_create(actor=world.actor(member), team=world.team_a, name="new")
    assert _bearer(client, fresh).status_code == 200  # a new token works as usual


@pytest.mark.django_db
def test_a_membership_deleted_outside_the_service_takes_its_tokens(world, client):
    """The Django admin (and a team's deletion) delete memberships without the service."""
    member = world.users_a[Role.VIEWER]
    _, raw = api_token_create(actor=world.actor(member), team=world.team_a, name="t")
    Membership.objects.filter(user=member, team=world.team_a).delete()
    assert _bearer(client, raw).status_code == 401
    Membership.objects.create(user=member, team=world.team_a, role=Role.VIEWER)
    assert _bearer(client, raw).status_code == 401
    assert ApiToken.objects.get(user=member).revoked_at is not None


@pytest.mark.django_db
def test_leaving_a_team_keeps_the_tokens_of_other_teams(world, client):
    member = world.users_a[Role.MEMBER]
    Membership.objects.create(user=member, team=world.team_b, role=Role.MEMBER)
    _, raw_a = api_token_create(actor=world.actor(member), team=world.team_a, name="a")
    _, raw_b = api_token_create(actor=world.actor(member), team=world.team_b, name="b")
    Membership.objects.filter(user=member, team=world.team_a).delete()
    assert _bearer(client, raw_a).status_code == 401
    assert _bearer(client, raw_b).status_code == 200


@pytest.mark.django_db(transaction=True)
async def test_websockets_refuse_and_close_a_removed_members_token(world, launched, monkeypatch):
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_S", 0.2)
    member = world.users_a[Role.MEMBER]
    raw = await database_sync_to_async(
        lambda: api_token_create(actor=world.actor(member), team=world.team_a, name="ws")[1]
    )()
    run = launched[0]["runs"][0]["id"]
    open_ws = Ws(f"/ws/runs/{run}/", token=raw)
    assert (await open_ws.connect())[0]
    assert (await open_ws.receive_json())["type"] == "snapshot"
    await database_sync_to_async(
        lambda: Membership.objects.filter(user=member, team=world.team_a).delete()
    )()
    # the open stream closes within the re-check interval
    closed = await open_ws.receive(timeout=5)
    assert closed["type"] == "websocket.close" and closed.get("code") == consumers.FORBIDDEN
    await open_ws.close()
    # and a new handshake with the token is refused
    again = Ws(f"/ws/runs/{run}/", token=raw)
    assert (await again.connect()) == (False, consumers.FORBIDDEN)
    await again.close()
