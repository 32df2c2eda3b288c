"""Rate limits on guessing (paddock.http.limits): failed logins and failed token
authentications are limited per address; valid traffic never is. Each test comes from an
address of its own, so counts of other tests (kept in Redis) do not reach it."""

from __future__ import annotations

import itertools
import json
import os

import pytest
from django.test import Client

from paddock.experiments.models import MetricPoint, Run
from paddock.experiments.states import run_transition
from paddock.experiments.tokens import run_token_mint
from paddock.teams.models import Role
from paddock.teams.services import api_token_create

pytestmark = pytest.mark.django_db
_addresses = itertools.count(1)


@pytest.fixture
def ip() -> str:
    # unique per test and per test session (the counts live in Redis for a minute)
    return f"10.{os.getpid() % 250}.{next(_addresses)}.{os.getpid() % 199 + 1}"


@pytest.fixture(autouse=True)
def low_limits(settings):
    settings.PADDOCK_RATE_LIMITS = {"login": (3, 300), "auth": (5, 60)}


def _login(ip: str, username: str, password: str):
    client = Client(REMOTE_ADDR=ip)
    return client.post(
        "/api/v1/session/login", json.dumps({"username": username, "password": password}),
        content_type="application/json",
    )  # fmt: skip


def test_failed_logins_are_limited_per_address_and_per_username(world, ip):
    user = world.users_a[Role.OWNER]
    user.set_password("right")
    user.save()
    for _ in range(3):
        assert _login(ip, user.username, "wrong").status_code == 400
    blocked = _login(ip, user.username, "right")  # even the right password now waits
    assert blocked.status_code == 429 and blocked.json()["code"] == "rate_limited"
    assert 0 < int(blocked["Retry-After"]) <= 300
    # another address guessing the same username is blocked too (a distributed guesser)
    assert _login(ip + "9", user.username, "right").status_code == 429
    # another user from another address is untouched
    other = world.users_a[Role.MEMBER]
    other.set_password("pw")
    other.save()
    assert _login(ip + "8", other.username, "pw").status_code == 200


def test_failed_api_tokens_are_limited_but_a_valid_one_never(world, ip):
    owner = world.users_a[Role.OWNER]
    raw = api_token_create(actor=world.actor(owner), team=world.team_a, name="t")[1]
    client = Client(REMOTE_ADDR=ip)
    replies = [
        client.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer pdk_guess{i}") for i in range(8)
    ]
    assert [r.status_code for r in replies] == [401] * 5 + [429] * 3
    # the code of every door's limit on failed authentications (the job doors' too)
    assert {r.json()["code"] for r in replies[5:]} == {"rate_limited"}
    for _ in range(20):
        assert client.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200


def test_bad_run_tokens_are_limited_and_valid_ingest_never(launched, ip):
    run = Run.objects.get(pk=launched[0]["runs"][0]["id"])
    Run.objects.filter(pk=run.pk).update(dispatch_count=1)
    run_transition(run=run, to_state="dispatching")
    token = run_token_mint(run=run, dispatch=1)
    client = Client(REMOTE_ADDR=ip)

    def post(raw: str, seq: int):
        body = {
            "dispatch": 1,
            "seq": seq,
            "events": [
                {"type": "metric", "step": seq, "time": 1764490000.0, "values": {"loss": 1.0}}
            ],
        }
        return client.post(
            f"/api/v1/runs/{run.pk}/ingest", json.dumps(body), content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {raw}",
        )  # fmt: skip

    bad = [post(f"pdr_guess{i}", 1).status_code for i in range(7)]
    assert bad == [401] * 5 + [429] * 2
    # the job shares the address with the guesser: its valid batches all go through
    for seq in range(1, 101):
        reply = post(token, seq)
        assert reply.status_code == 200, (seq, reply.content)
    assert MetricPoint.objects.filter(run=run).count() == 100
