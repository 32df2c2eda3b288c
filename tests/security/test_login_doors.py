"""The Django admin's login form is limited like the session login, and the two doors share
the counts: a guesser cannot try twice as many passwords by splitting them."""

from __future__ import annotations

import itertools
import json
import os

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db
_addresses = itertools.count(1)


@pytest.fixture
def ip() -> str:
    return f"10.{os.getpid() % 250}.{100 + next(_addresses) % 90}.{os.getpid() % 199 + 1}"


@pytest.fixture(autouse=True)
def low_limits(settings):
    settings.PADDOCK_RATE_LIMITS = {"login": (3, 300), "auth": (5, 60)}


@pytest.fixture
def staff(db, ip):
    # a username of its own per test: the per-username count lives in Redis for 300 s
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_superuser(username=f"staff-{ip}", password="right")


def _admin_login(ip: str, username: str, password: str):
    client = Client(REMOTE_ADDR=ip)
    client.get("/admin/login/")
    return client.post("/admin/login/", {"username": username, "password": password,
                                         "next": "/admin/"})  # fmt: skip


def test_failed_admin_logins_are_limited_per_address_and_username(staff, ip):
    for _ in range(3):
        reply = _admin_login(ip, staff.username, "wrong")
        assert reply.status_code == 200  # the form again, with its error
    blocked = _admin_login(ip, staff.username, "right")
    assert blocked.status_code == 429 and 0 < int(blocked["Retry-After"]) <= 300
    assert _admin_login(ip + "9", staff.username, "right").status_code == 429  # per username
    other = _admin_login(ip + "8", "somebody-else", "x")  # another user elsewhere: untouched
    assert other.status_code == 200


def test_the_right_password_logs_in_under_the_limit(staff, ip):
    reply = _admin_login(ip, staff.username, "right")
    assert reply.status_code == 302 and reply["Location"] == "/admin/"


def test_the_admin_form_and_the_session_login_share_the_counts(staff, ip):
    for _ in range(2):
        assert _admin_login(ip, staff.username, "wrong").status_code == 200
    session = Client(REMOTE_ADDR=ip).post(
        "/api/v1/session/login", json.dumps({"username": staff.username, "password": "wrong"}),
        content_type="application/json",
    )  # fmt: skip
    assert session.status_code == 400
    assert _admin_login(ip, staff.username, "right").status_code == 429
