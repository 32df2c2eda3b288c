"""Credentials that stop working close the websockets they opened at once, through the real
server: a revoked API token, a removed member, a logged-out browser session. Each test
opens a stream, ends its credentials, then awaits the close event for at most a second
(docs/live-protocol.md promises "within a second")."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
import requests
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from paddock.live.consumers import FORBIDDEN
from paddock.teams.models import ApiToken, Membership, Role
from paddock.teams.services import api_token_create, api_token_revoke, member_remove

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
# The close is pushed (a revocation is published and each process closes its own sockets at
# once: live/revocations.py), about 0.2-0.55 s on a loaded 2-core machine. The test waits on
# the close event; its bound only keeps a lost close from hanging the suite, so it leaves
# room for a CI box under two pytest sessions rather than asserting the 1 s design figure.
CLOSE_WITHIN_S = 5.0


def _closed_code(ws) -> int:
    """The close code, once the close event arrives (after at most CLOSE_WITHIN_S)."""
    with pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=CLOSE_WITHIN_S)
    return closed.value.rcvd.code


@contextmanager
def _stream(server, run_id: int, **kw):
    with connect(f"ws://127.0.0.1:{server.port}/ws/runs/{run_id}/", origin=server.url,
                 **kw) as ws:  # fmt: skip
        assert json.loads(ws.recv(timeout=10))["type"] == "snapshot"
        yield ws


def test_a_revoked_token_and_a_removed_member_close_their_streams(asgi_server, world, launched):
    run = launched[0]["runs"][0]["id"]
    member = world.users_a[Role.MEMBER]
    token, raw = api_token_create(actor=world.actor(member), team=world.team_a, name="ws")
    _, kept = api_token_create(actor=world.actor(member), team=world.team_a, name="kept")
    with (
        _stream(asgi_server, run, additional_headers={"Authorization": f"Bearer {raw}"}) as ws,
        _stream(asgi_server, run, additional_headers={"Authorization": f"Bearer {kept}"}) as other,
    ):
        api_token_revoke(actor=world.actor(member), token=token)
        assert _closed_code(ws) == FORBIDDEN
        other.ping().wait(5)  # the member's other token still streams
        owner = world.actor(world.users_a[Role.OWNER])
        member_remove(
            actor=owner, membership=Membership.objects.get(user=member, team=world.team_a)
        )
        assert _closed_code(other) == FORBIDDEN
    assert ApiToken.objects.filter(user=member, revoked_at=None).count() == 0


def test_logging_out_closes_the_sessions_streams(asgi_server, world, launched):
    run = launched[0]["runs"][0]["id"]
    user = world.users_a[Role.VIEWER]
    user.set_password("pw-of-the-test")
    user.save()
    browser = requests.Session()
    browser.get(f"{asgi_server.url}/api/v1/session/csrf", timeout=10)
    csrf = {"X-CSRFToken": browser.cookies["csrftoken"]}
    login = {"username": user.username, "password": "pw-of-the-test"}
    assert browser.post(f"{asgi_server.url}/api/v1/session/login", json=login, headers=csrf,
                        timeout=10).status_code == 200  # fmt: skip
    cookie = "; ".join(f"{k}={v}" for k, v in browser.cookies.items())
    other_browser = requests.Session()  # the same user logged in elsewhere: not logged out
    other_browser.get(f"{asgi_server.url}/api/v1/session/csrf", timeout=10)
    other_csrf = {"X-CSRFToken": other_browser.cookies["csrftoken"]}
    assert other_browser.post(f"{asgi_server.url}/api/v1/session/login", json=login,
                              headers=other_csrf, timeout=10).status_code == 200  # fmt: skip
    other_cookie = "; ".join(f"{k}={v}" for k, v in other_browser.cookies.items())
    with (
        _stream(asgi_server, run, additional_headers={"Cookie": cookie}) as ws,
        _stream(asgi_server, run, additional_headers={"Cookie": other_cookie}) as other,
    ):
        csrf = {"X-CSRFToken": browser.cookies["csrftoken"]}
        assert browser.post(f"{asgi_server.url}/api/v1/session/logout", headers=csrf,
                            timeout=10).status_code == 200  # fmt: skip
        assert _closed_code(ws) == FORBIDDEN
        other.ping().wait(5)
