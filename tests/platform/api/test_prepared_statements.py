"""PADDOCK_PREPARED_STATEMENTS: on (the default), the per-request statements are prepared
on their PostgreSQL connection (core/fixed_sql.py); off (behind a pooler that drops
prepared statements), nothing is prepared and the answers are the same."""

from __future__ import annotations

import pytest
from django.db import connection
from rest_framework.test import APIClient

from paddock.teams.models import Role
from paddock.teams.services import api_token_create

pytestmark = pytest.mark.django_db


def _prepared_here() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        return cursor.fetchone()[0]


def _me(world) -> dict:
    user = world.users_a[Role.MEMBER]
    _, raw = api_token_create(actor=world.actor(user), team=world.team_a, name="prep")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    reply = client.get("/api/v1/me")
    assert reply.status_code == 200, reply.content[:300]
    return reply.json()


@pytest.mark.parametrize("on", [True, False])
def test_the_setting_decides_whether_statements_are_prepared(world, settings, on):
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    settings.PADDOCK_PREPARED_STATEMENTS = on
    with connection.cursor() as cursor:  # none prepared yet (psycopg forgets its own too)
        cursor.execute("DEALLOCATE ALL")
    body = _me(world)
    assert body["username"] == world.users_a[Role.MEMBER].username
    assert (_prepared_here() > 0) is on
