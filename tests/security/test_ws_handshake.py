"""Websocket handshakes against the server as `paddock up` runs it: a path no route takes
is refused (HTTP 403 before accept), never a 500; an oversized or malformed handshake gets
an answer and a closed socket, not silence; a program with a token header (Authorization
or the bearer subprotocol) and no Origin is let in (docs/live-protocol.md), a token in the
URL never is, and a session cookie only counts with the site's own Origin."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from websockets.sync.client import connect

from paddock.teams.models import Role
from paddock.teams.services import api_token_create
from tests.security.rawhttp import handshake

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def token(world):
    owner = world.users_a[Role.OWNER]
    return api_token_create(actor=world.actor(owner), team=world.team_a, name="ws")[1]


def _bearer(token: str) -> bytes:
    return b"Authorization: Bearer " + token.encode() + b"\r\n"


def test_paths_no_route_takes_are_refused_not_server_errors(paddock_server, launched, token):
    run = launched[0]["runs"][0]["id"]
    experiment = launched[0]["experiment"]["id"]
    paths = ["/ws/nothing/", "/ws/", "/ws", "/ws/runs/", "/ws/runs/abc/", "/ws/runs/-1/",
             f"/ws/runs/{run}", f"/ws/experiments/{experiment}", "/ws/runs/0/",
             "/ws/runs/1.5/", "/ws/runs/9223372036854775808/", "/ws/runs/" + "9" * 40 + "/",
             f"/ws/runs/{run}/extra/", f"/ws/runs/{run}//", "/ws/runs/%00/", "/ws/runs/%F0%9F/",
             f"/ws/experiments/-{experiment}/", "/api/v1/me", "/"]  # fmt: skip
    for path in paths:
        reply = handshake(paddock_server.port, path, extra=_bearer(token))
        assert reply.status in (403, 404), (path, reply)
    # a query string the token lookup must never take to the database as is
    for query in ("token=pdk_%00%00%00%00%00%00%00%00%00%00%00%00%00%00%00%00%00%00%00%00",
                  "token=pdk_" + "%C3%A9" * 30, "token=" + "x" * 4000, "after=1:" + "9" * 40,
                  "after=" + "1:2:3," * 500, "token=pdk_%ED%B3%BF" * 3):  # fmt: skip
        reply = handshake(paddock_server.port, f"/ws/runs/{run}/?{query}")
        assert reply.status in (101, 403), (query[:60], reply)
    # the routes themselves still open
    for path in (f"/ws/runs/{run}/", f"/ws/experiments/{experiment}/"):
        assert handshake(paddock_server.port, path, extra=_bearer(token)).status == 101, path


@pytest.mark.parametrize(
    ("target", "extra"),
    [
        ("/ws/runs/1/?token=" + "a" * 10_000, b""),
        ("/ws/runs/1/?token=" + "a" * 100_000, b""),
        ("/ws/" + "x" * 1_000_000, b""),
        ("/ws/runs/1/", b"X-Long: " + b"h" * 20_000 + b"\r\n"),
        ("/ws/runs/1/", b"".join(b"X-%d: v\r\n" % i for i in range(500))),
        ("/ws/runs/1/ HTTP/1.1 junk", b""),
    ],
    ids=["10k-line", "100k-line", "1M-line", "20k-header", "500-headers", "bad-line"],
)
def test_an_oversized_or_malformed_handshake_is_answered_and_closed(paddock_server, target, extra):
    reply = handshake(paddock_server.port, target, extra=extra, timeout=10)
    assert reply.status is not None and 400 <= reply.status < 500, reply
    assert reply.seconds < 5 and reply.closed, reply


def test_a_program_with_a_token_and_no_origin_is_let_in(paddock_server, launched, token):
    run = launched[0]["runs"][0]["id"]
    url = f"ws://127.0.0.1:{paddock_server.port}/ws/runs/{run}/"
    bearer = {"Authorization": f"Bearer {token}"}
    with connect(url, origin=None, additional_headers=bearer) as ws:  # as the CLI or a script
        assert json.loads(ws.recv(timeout=10))["type"] == "snapshot"
    # a client that cannot set headers (a browser's WebSocket) offers the token as a
    # subprotocol beside `paddock`, which the server accepts
    with connect(url, subprotocols=["paddock", f"paddock.bearer.{token}"]) as ws:
        assert ws.subprotocol == "paddock"
        assert json.loads(ws.recv(timeout=10))["type"] == "snapshot"
    # a token in the URL reaches access logs: it is never read
    assert handshake(paddock_server.port, f"/ws/runs/{run}/?token={token}").status == 403


def test_a_session_cookie_counts_only_with_the_sites_own_origin(paddock_server, world, launched):
    run = launched[0]["runs"][0]["id"]
    browser = Client()
    browser.force_login(world.users_a[Role.VIEWER])
    cookie = f"sessionid={browser.cookies['sessionid'].value}"
    own = "http://127.0.0.1:8000"  # one of ALLOWED_HOSTS, as a browser on the site sends it
    path = f"/ws/runs/{run}/"
    assert handshake(paddock_server.port, path, origin=own, cookie=cookie).status == 101
    # a page of another site riding on the cookie (cross-site websocket hijacking), and
    # Origins that are no URL (`http://[::1` was a 500 in Channels' validator)
    for origin in ("https://evil.example", "http://127.0.0.1.evil.example", "null",
                   "http://[::1", "http://[127.0.0.1]:8000", "http://127.0.0.1:99999",
                   "http://127.0.0.1:abc", "\u00e9", ""):  # fmt: skip
        assert handshake(paddock_server.port, path, origin=origin, cookie=cookie).status == 403
    # no Origin: a program, whose cookies are not a credential (only a token is)
    assert handshake(paddock_server.port, path, cookie=cookie).status == 403
