"""Fixtures of the platform tests: two teams with a user per role, a shared cluster, API
clients signed in as any of them, and a launch helper."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from rest_framework.test import APIClient

from paddock.experiments import hooks
from paddock.teams.access import actor_for
from paddock.teams.models import Role
from tests.platform.factories import ClusterFactory, MembershipFactory, TeamFactory, UserFactory

ROLES = [Role.VIEWER, Role.MEMBER, Role.ADMIN, Role.OWNER]
TINY_SPEC = {"train": {"steps": 5}, "rollout": {"max_new_tokens": 4}}


@dataclass
class World:
    team_a: object
    team_b: object
    users_a: dict  # role → user of team A
    users_b: dict
    cluster: object
    outsider: object

    def actor(self, user, **kw):
        return actor_for(user=user, **kw)


@pytest.fixture
def world(db) -> World:
    team_a, team_b = TeamFactory(slug="team-a"), TeamFactory(slug="team-b")
    users_a = {
        role: MembershipFactory(team=team_a, role=role, user=UserFactory(username=f"a-{role}")).user
        for role in ROLES
    }
    users_b = {
        role: MembershipFactory(team=team_b, role=role, user=UserFactory(username=f"b-{role}")).user
        for role in ROLES
    }
    return World(
        team_a=team_a,
        team_b=team_b,
        users_a=users_a,
        users_b=users_b,
        cluster=ClusterFactory(name="shared", backends=["torch", "vllm"]),
        outsider=UserFactory(username="outsider"),
    )


@pytest.fixture
def client_as():
    """client_as(user) → an APIClient with a session of `user` (None: anonymous)."""

    def make(user=None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_login(user)
        return client

    return make


def launch(client, team, *, spec=None, backends=None, seeds=1, **extra):
    payload = {"team": team.pk, "name": "exp", "spec": spec or TINY_SPEC, "seeds": seeds, **extra}
    if backends is not None:
        payload["backends"] = backends
    return client.post("/api/v1/experiments", payload, format="json")


@pytest.fixture
def quiet_hooks(monkeypatch):
    """The hooks as no-ops, for tests whose commits would otherwise start Celery tasks and
    broadcasts (the dispatch and live work fill the hooks in)."""
    for name in ("run_enqueued", "run_state_changed", "run_control_requested"):
        monkeypatch.setattr(hooks, name, lambda *args: None)


@pytest.fixture
def launched(world, client_as):
    """An experiment of team A with two runs (torch, vllm), and one of team B."""
    a = launch(client_as(world.users_a[Role.MEMBER]), world.team_a, backends=["torch", "vllm"])
    b = launch(client_as(world.users_b[Role.MEMBER]), world.team_b)
    assert a.status_code == 201, a.json()
    assert b.status_code == 201, b.json()
    return a.json(), b.json()
