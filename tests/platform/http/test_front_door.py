"""The request policy (paddock/http/policy.py) holds at every door of the platform: each rule
is one test, run against each door a request can come through.

The doors, each called as the ASGI app calls it: Django's middleware chain (a view the fast
path does not take), the fast reads (`fast_read`, then the chain for what it leaves), the
ingest door (live/ingest_asgi.py) and the websocket handshake (paddock.asgi's websocket
app). The policy answers the same at each: a refused host is 400 `bad_host` (a websocket:
refused before accept), plain http under https settings is redirected (GET) or refused
403 `https_required`, every answer carries the security headers, `Authorization: Bearer`
is read alike, a token's requests are counted alike."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from io import BytesIO

import pytest
from django.core.handlers.asgi import ASGIRequest

from paddock.api.fast_reads import fast_read
from paddock.asgi import application, django_asgi_app
from paddock.experiments.models import Run
from paddock.experiments.states import run_transition
from paddock.experiments.tokens import run_token_mint
from paddock.http import limits
from paddock.live.ingest_asgi import ingest_router
from paddock.teams.models import Role
from paddock.teams.services import api_token_create

HOST = b"127.0.0.1"


@dataclass
class Reply:
    status: int  # a websocket: 101 accepted, 403 refused before accept
    headers: dict[str, str]  # lower-case names
    body: dict | None


def _scope(kind: str, method: str, path: str, headers: list, scheme: str) -> dict:
    return {
        "type": kind, "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": scheme, "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": b"", "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
        "headers": headers, "subprotocols": [],
    }  # fmt: skip


def _django_reply(response) -> Reply:
    body = json.loads(response.content) if response.content else None
    return Reply(response.status_code, {k.lower(): v for k, v in response.items()}, body)


class Door:
    """A door: `call(headers, scheme)` sends it the request it takes, as its caller would."""

    name = ""
    method, path = "GET", ""

    def __init__(self, fixtures: dict):
        self.fixtures = fixtures

    def call(self, headers: list[tuple[bytes, bytes]], scheme: str = "http") -> Reply:
        raise NotImplementedError


class DjangoDoor(Door):
    """A view of the middleware chain the fast path never takes: /api/v1/teams."""

    name, path = "django", "/api/v1/teams"

    def call(self, headers, scheme="http"):
        scope = _scope("http", self.method, self.path, headers, scheme)
        request = ASGIRequest(scope, BytesIO())
        assert fast_read(request) is None
        return _django_reply(django_asgi_app.get_response(request))


class FastDoor(Door):
    """The fast reads: /api/v1/me; what they leave goes down the chain, as in the lane."""

    name, path = "fast", "/api/v1/me"

    def __init__(self, fixtures: dict):
        super().__init__(fixtures)
        self.answered: list[bool] = []  # whether the fast path answered, per call

    def call(self, headers, scheme="http"):
        request = ASGIRequest(_scope("http", self.method, self.path, headers, scheme), BytesIO())
        response = fast_read(request)
        self.answered.append(response is not None)
        return _django_reply(response or django_asgi_app.get_response(request))


class IngestDoor(Door):
    name, method = "ingest", "POST"

    @property
    def path(self):
        return f"/api/v1/runs/{self.fixtures['run']}/ingest"

    def call(self, headers, scheme="http"):
        body = json.dumps({"dispatch": 1, "seq": 1, "events": []}).encode()
        headers = [*headers, (b"content-length", str(len(body)).encode())]
        sent: list[dict] = []

        async def never_django(scope, receive, send):
            raise AssertionError("an ingest POST must not reach Django")

        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            sent.append(message)

        scope = _scope("http", self.method, self.path, headers, scheme)
        asyncio.run(ingest_router(never_django)(scope, receive, send))
        start, content = sent
        names = {k.decode(): v.decode("latin-1") for k, v in start["headers"]}
        return Reply(start["status"], names, json.loads(content["body"] or b"null"))


class WebsocketDoor(Door):
    name = "websocket"

    @property
    def path(self):
        return f"/ws/runs/{self.fixtures['run']}/"

    def call(self, headers, scheme="http"):
        scope = _scope("websocket", "GET", self.path, headers, "wss" if scheme == "https" else "ws")
        sent: list[dict] = []
        inbox: asyncio.Queue = asyncio.Queue()

        async def send(message):
            sent.append(message)
            if message["type"] in ("websocket.accept", "websocket.close"):
                await inbox.put({"type": "websocket.disconnect", "code": 1000})

        async def run():
            await inbox.put({"type": "websocket.connect"})
            await asyncio.wait_for(application(scope, inbox.get, send), 30)

        asyncio.run(run())
        first = sent[0]
        return Reply(101 if first["type"] == "websocket.accept" else 403, {}, None)


# doors whose answer needs rows that a thread other than the test's reads
IN_THREADS = pytest.mark.django_db(transaction=True)
HTTP_DOORS = [DjangoDoor, FastDoor, pytest.param(IngestDoor, marks=IN_THREADS)]
ALL_DOORS = [*HTTP_DOORS, pytest.param(WebsocketDoor, marks=IN_THREADS)]


@pytest.fixture
def fixtures(world, launched) -> dict:
    """A run of team A in `dispatching` with its run token, and two API tokens of its owner."""
    run = Run.objects.get(pk=launched[0]["runs"][0]["id"])
    Run.objects.filter(pk=run.pk).update(dispatch_count=1)
    run_transition(run=run, to_state="dispatching")
    owner = world.actor(world.users_a[Role.OWNER])
    _, api = api_token_create(actor=owner, team=world.team_a, name="door")
    _, fresh = api_token_create(actor=owner, team=world.team_a, name="counted")
    return {"run": run.pk, "run_token": run_token_mint(run=run, dispatch=1), "api_token": api,
            "fresh_token": fresh}  # fmt: skip


def _token(door: Door) -> str:
    return door.fixtures["run_token" if door.name == "ingest" else "api_token"]


pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("door_class", ALL_DOORS)
def test_a_host_not_allowed_is_refused(door_class, fixtures, settings):
    settings.ALLOWED_HOSTS = ["paddock.example.com"]
    door = door_class(fixtures)
    bearer = (b"authorization", f"Bearer {_token(door)}".encode())
    reply = door.call([(b"host", b"evil.example"), bearer])
    if door.name == "websocket":
        assert reply.status == 403
    else:
        assert (reply.status, reply.body["code"]) == (400, "bad_host")
    # the allowed host passes this rule (and meets the others: a token, a route)
    assert door.call([(b"host", b"paddock.example.com"), bearer]).status in (101, 200)


@pytest.mark.parametrize("door_class", ALL_DOORS)
def test_plain_http_is_redirected_or_refused_under_https_settings(door_class, fixtures, settings):
    settings.SECURE_SSL_REDIRECT = True
    door = door_class(fixtures)
    bearer = (b"authorization", f"Bearer {_token(door)}".encode())
    reply = door.call([(b"host", HOST), bearer])
    if door.name == "websocket":
        assert reply.status == 403
    elif door.method == "GET":  # a redirect keeps a GET a GET
        assert reply.status == 301
        assert reply.headers["location"] == f"https://127.0.0.1{door.path}"
    else:  # a POST would come back a GET, its token sent in clear already
        assert (reply.status, reply.body["code"]) == (403, "https_required")
    # https: at the connection, or as the trusted proxy says it
    assert door.call([(b"host", HOST), bearer], scheme="https").status in (101, 200)
    proxied = [(b"host", HOST), bearer, (b"x-forwarded-proto", b"https")]
    assert door.call(proxied).status in (101, 200)


@pytest.mark.parametrize("door_class", HTTP_DOORS)
def test_every_answer_carries_the_security_headers(door_class, fixtures, settings):
    settings.SECURE_HSTS_SECONDS = 3600
    door = door_class(fixtures)
    for token, status in ((_token(door), 200), ("pdk_wrong", 401)):  # an answer, a refusal
        bearer = (b"authorization", f"Bearer {token}".encode())
        for scheme in ("http", "https"):
            reply = door.call([(b"host", HOST), bearer], scheme=scheme)
            assert reply.status == status, (scheme, reply)
            headers = reply.headers
            assert headers["x-content-type-options"] == "nosniff"
            assert headers["x-frame-options"] == "DENY"
            assert headers["referrer-policy"] == "same-origin"
            assert headers["cross-origin-opener-policy"] == "same-origin"
            assert headers["cache-control"] == "no-store"  # an API answer
            hsts = headers.get("strict-transport-security")
            assert hsts == ("max-age=3600" if scheme == "https" else None), (scheme, headers)
    if door.name == "fast":  # the 200s came from the fast path itself, the 401s from the chain
        assert door.answered == [True, True, False, False]


@pytest.mark.parametrize("door_class", ALL_DOORS)
def test_the_bearer_header_is_read_alike(door_class, fixtures):
    door = door_class(fixtures)
    token = _token(door)
    for header in (f"Bearer {token}", f"bearer {token}", f"BEARER  {token} "):
        reply = door.call([(b"host", HOST), (b"authorization", header.encode())])
        assert reply.status in (101, 200), (header, reply)
    for header in ("Bearer", "Bearer ", f"Bearer {token} extra"):
        reply = door.call([(b"host", HOST), (b"authorization", header.encode())])
        if door.name == "websocket":
            assert reply.status == 403, header
        else:
            assert (reply.status, reply.body["code"]) == (401, "token_invalid"), (header, reply)
    # another scheme is no bearer token: as if none were sent
    basic = door.call([(b"host", HOST), (b"authorization", b"Basic dXNlcjpwdw==")])
    if door.name == "websocket":
        assert basic.status == 403
    else:
        assert basic.status == 401 and basic.body["code"] == "not_authenticated", basic


@pytest.mark.parametrize("door_class", [DjangoDoor, FastDoor])
def test_a_tokens_requests_are_counted_once_and_limited(door_class, fixtures, settings):
    """PADDOCK_API_RATE_LIMIT requests a minute per API token, whichever door of the REST
    API they use; past it 429 `rate_limited` with Retry-After. A request that the fast path
    leaves to the chain is counted once."""
    settings.PADDOCK_API_RATE_LIMIT = 3
    door = door_class(fixtures)
    fresh = [(b"host", HOST), (b"authorization", f"Bearer {fixtures['fresh_token']}".encode())]
    assert [door.call(fresh).status for _ in range(3)] == [200] * 3
    over = door.call(fresh)
    assert (over.status, over.body["code"]) == (429, "rate_limited")
    assert 0 < int(over.headers["retry-after"]) <= 60
    # another token has its own count
    other = [(b"host", HOST), (b"authorization", f"Bearer {fixtures['api_token']}".encode())]
    assert door.call(other).status == 200


def _web_scrape(meta: dict) -> int:
    from django.test import Client

    return Client().get("/metrics", **meta).status_code


def _worker_scrape(meta: dict) -> int:
    from paddock.monitoring.celery_signals import _scrape_app

    statuses = []
    environ = {"PATH_INFO": "/metrics", "REQUEST_METHOD": "GET", **meta}
    _scrape_app(environ, lambda status, headers: statuses.append(int(status.split()[0])))
    return statuses[0]


@pytest.mark.parametrize("scrape", [_web_scrape, _worker_scrape], ids=["web", "worker"])
def test_the_metrics_scrape_rule_is_the_same_at_both_scrape_doors(scrape, settings):
    """The web's /metrics and a Celery worker's own scrape port: the bearer
    PADDOCK_METRICS_TOKEN when one is set, else an unproxied loopback peer only."""
    settings.PADDOCK_METRICS_TOKEN = ""
    assert scrape({"REMOTE_ADDR": "127.0.0.1"}) == 200
    assert scrape({"REMOTE_ADDR": "::1"}) == 200
    assert scrape({"REMOTE_ADDR": "10.0.0.7"}) == 403
    # a proxy on the same host: the peer is local, the client is not
    assert scrape({"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "203.0.113.9"}) == 403
    settings.PADDOCK_METRICS_TOKEN = "scrape-secret"
    assert scrape({"REMOTE_ADDR": "127.0.0.1"}) == 403
    for header, status in (("Bearer scrape-secret", 200), ("bearer scrape-secret", 200),
                           ("Bearer wrong", 403), ("Bearer scrape-secret x", 403),
                           ("Basic scrape-secret", 403)):  # fmt: skip
        assert scrape({"REMOTE_ADDR": "10.0.0.7", "HTTP_AUTHORIZATION": header}) == status


@pytest.fixture(autouse=True)
def _fresh_counts():
    limits.cache.clear()  # failed-token counts of earlier tests, from this test's address
