"""API tokens: shown once, stored as a hash, expire, can be revoked, act for one team."""

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from paddock.teams.models import ApiToken, AuditEvent, Role


def bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


@pytest.fixture
def created(world, client_as):
    reply = client_as(world.users_a[Role.MEMBER]).post(
        f"/api/v1/teams/{world.team_a.pk}/tokens", {"name": "laptop"}, format="json"
    )
    assert reply.status_code == 201
    return reply.json()


def test_the_secret_is_shown_once_and_only_its_hash_is_stored(world, client_as, created):
    secret = created["token"]
    assert secret.startswith("pdk_") and len(secret) > 40
    row = ApiToken.objects.get(pk=created["id"])
    assert row.hashed == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in str(vars(row))
    listed = client_as(world.users_a[Role.MEMBER]).get(f"/api/v1/teams/{world.team_a.pk}/tokens")
    assert listed.status_code == 200
    assert "token" not in listed.json()[0]
    assert listed.json()[0]["prefix"] == secret[4:16]


def test_a_token_acts_for_its_team_only_with_the_users_role(world, created, launched):
    client = bearer(created["token"])
    me = client.get("/api/v1/me").json()
    assert [t["slug"] for t in me["teams"]] == ["team-a"] and me["token"] == created["prefix"]
    assert {r["team"] for r in client.get("/api/v1/runs").json()["results"]} == {world.team_a.pk}
    assert ApiToken.objects.get(pk=created["id"]).last_used_at is not None


def test_removing_the_member_revokes_the_token(world, created):
    # (tests/security/test_member_tokens.py: every path, and re-adding the member)
    world.team_a.memberships.filter(user=world.users_a[Role.MEMBER]).delete()
    assert bearer(created["token"]).get("/api/v1/runs").status_code == 401
    reply = bearer(created["token"]).get(f"/api/v1/teams/{world.team_a.pk}")
    assert reply.status_code == 401
    assert ApiToken.objects.get(pk=created["id"]).revoked_at is not None


def test_an_expired_token_is_refused(world, created):
    ApiToken.objects.filter(pk=created["id"]).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    reply = bearer(created["token"]).get("/api/v1/me")
    assert reply.status_code == 401
    assert reply.json()["code"] == "token_expired"


def test_expiry_must_lie_ahead(world, client_as):
    reply = client_as(world.users_a[Role.MEMBER]).post(
        f"/api/v1/teams/{world.team_a.pk}/tokens",
        {"name": "old", "expires_at": "2000-01-01T00:00:00Z"},
        format="json",
    )
    assert reply.status_code == 400
    assert reply.json()["field"] == "expires_at"


def test_a_token_lives_at_most_the_operators_limit(world, client_as, settings, created):
    """PADDOCK_TOKEN_MAX_DAYS: a token made without an expiry gets it, one asking for more
    is refused naming the field, and a token older than the limit (made before it was
    lowered) is refused as expired."""
    settings.PADDOCK_TOKEN_MAX_DAYS = 30
    client = client_as(world.users_a[Role.MEMBER])
    url = f"/api/v1/teams/{world.team_a.pk}/tokens"
    made = client.post(url, {"name": "default"}, format="json")
    assert made.status_code == 201
    lifetime = ApiToken.objects.get(pk=made.json()["id"])
    assert timedelta(days=29) < lifetime.expires_at - timezone.now() <= timedelta(days=30)
    too_long = (timezone.now() + timedelta(days=31)).isoformat()
    refused = client.post(url, {"name": "long", "expires_at": too_long}, format="json")
    assert refused.status_code == 400 and refused.json()["field"] == "expires_at"
    # `created` (made under the default) is fine until it is older than the limit
    assert bearer(created["token"]).get("/api/v1/me").status_code == 200
    ApiToken.objects.filter(pk=created["id"]).update(
        created_at=timezone.now() - timedelta(days=30), expires_at=None
    )
    reply = bearer(created["token"]).get("/api/v1/me")
    assert (reply.status_code, reply.json()["code"]) == (401, "token_expired")


def test_a_revoked_token_is_refused_and_revocation_is_audited(world, client_as, created):
    client = client_as(world.users_a[Role.MEMBER])
    reply = client.delete(f"/api/v1/teams/{world.team_a.pk}/tokens/{created['id']}")
    assert reply.status_code == 200 and reply.json()["revoked_at"]
    refused = bearer(created["token"]).get("/api/v1/me")
    assert refused.status_code == 401 and refused.json()["code"] == "token_revoked"
    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert actions[-2:] == ["token.create", "token.revoke"]


@pytest.mark.parametrize(
    "header",
    [
        "Bearer pdk_nonsense",
        "Bearer",
        "Bearer a b",
        "Bearer pdk_" + "x" * 43,
        "Bearer pdr_" + "x" * 43,
    ],
)
def test_garbage_tokens_are_401_with_a_code(db, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    reply = client.get("/api/v1/me")
    assert reply.status_code == 401
    assert reply.json()["code"] == "token_invalid"


def test_admins_see_and_revoke_every_token_members_only_their_own(world, client_as, created):
    url = f"/api/v1/teams/{world.team_a.pk}/tokens"
    assert len(client_as(world.users_a[Role.ADMIN]).get(url).json()) == 1
    assert client_as(world.users_a[Role.VIEWER]).get(url).json() == []
    reply = client_as(world.users_a[Role.ADMIN]).delete(f"{url}/{created['id']}")
    assert reply.status_code == 200


def test_a_token_cannot_create_teams_or_set_quotas(world, created):
    client = bearer(created["token"])
    assert client.post("/api/v1/teams", {"name": "x"}, format="json").status_code == 403


def test_session_writes_need_csrf(world):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(world.users_a[Role.OWNER])
    reply = client.post("/api/v1/teams", {"name": "new"}, format="json")
    assert reply.status_code == 403
    assert reply.json()["code"] == "csrf_failed"
    assert "CSRF" in reply.json()["message"]
