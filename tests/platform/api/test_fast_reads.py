"""The fast reads (api/fast_reads.py) answer exactly as the full path does (Django's
middleware chain and DRF): the same status, body and headers, over the same fixtures; and
whatever they do not answer with 200 (a bad or dead token, another team's run, a bad
parameter, a cursor, a host, an Accept they cannot meet) they leave to the full path, which
answers as it always has."""

from __future__ import annotations

from io import BytesIO

import pytest
from django.core.handlers.asgi import ASGIRequest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from paddock.api.fast_reads import fast_read
from paddock.asgi import django_asgi_app
from paddock.experiments.metrics import metric_points_store
from paddock.experiments.models import Experiment, Run
from paddock.http.lanes import LanedASGIHandler
from paddock.teams.models import ApiToken, Membership, Role
from paddock.teams.services import api_token_authenticate, api_token_create
from tests.platform.conftest import launch


def _request(path: str, token: str | None, *headers: tuple[bytes, bytes]) -> ASGIRequest:
    path, _, query = path.partition("?")
    sent = [(b"host", b"127.0.0.1"), *headers]
    if token is not None:
        sent.append((b"authorization", f"Bearer {token}".encode()))
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": query.encode(), "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000), "headers": sent,
    }  # fmt: skip
    return ASGIRequest(scope, BytesIO())


def _answer(response) -> tuple[int, bytes, list[tuple[str, str]]]:
    return response.status_code, response.content, list(response.items())


def _both(path, token, *headers, handler=django_asgi_app):
    """(the fast path's answer or None, the full path's answer) to the same request, and
    the statements each ran."""
    with CaptureQueriesContext(connection) as fast_queries:
        mine = fast_read(_request(path, token, *headers))
    with CaptureQueriesContext(connection) as full_queries:
        full = handler.get_response(_request(path, token, *headers))
    mine = None if mine is None else _answer(mine)
    return mine, _answer(full), len(fast_queries), len(full_queries)


@pytest.fixture
def reads(world, client_as, launched):
    """Team A's member with a token, an experiment of team A with tags and three runs with
    points (one with a non-finite value), and team B's run."""
    member = world.users_a[Role.MEMBER]
    _, raw = api_token_create(actor=world.actor(member), team=world.team_a, name="fast")
    api_token_authenticate(raw=raw)  # its first use stamps last_used_at (a statement more)
    session = client_as(member)
    assert launch(session, world.team_a, tags=["b-tag", "a-tag", "ünï"]).status_code == 201
    for run in Run.objects.filter(team=world.team_a):
        points = [(k, s, 1764490000.5 + s, s * 0.25) for k in ("a", "b", "reward/mean")
                  for s in range(30)]  # fmt: skip
        points.append(("accuracy", 31, 0.0, float("nan")))
        metric_points_store(run_id=run.pk, points=points)
    runs = list(Run.objects.filter(team=world.team_a).order_by("id"))
    other = Run.objects.filter(team=world.team_b).first()
    return raw, runs, other


def _same(path, token, *headers) -> None:
    mine, full, fast_statements, full_statements = _both(path, token, *headers)
    assert full[0] == 200, full
    assert mine == full
    assert fast_statements == full_statements  # and no statement more


@pytest.mark.django_db
def test_the_hot_reads_answer_as_the_full_path(reads):
    raw, runs, _ = reads
    experiment = Experiment.objects.filter(team=runs[0].team).order_by("id").first()
    paths = [
        "/api/v1/runs", "/api/v1/runs?page_size=50", "/api/v1/runs?limit=2",
        f"/api/v1/runs?experiment={experiment.pk}", f"/api/v1/runs?team={runs[0].team_id}",
        "/api/v1/runs?state=queued,running", "/api/v1/runs?backend=torch",
        f"/api/v1/runs/{runs[0].pk}", f"/api/v1/runs/{runs[-1].pk}",
        f"/api/v1/runs/{runs[0].pk}/metrics?keys=a,b", f"/api/v1/runs/{runs[0].pk}/metrics",
        f"/api/v1/runs/{runs[0].pk}/metrics?keys=accuracy&max_points=4&x=step",
        f"/api/v1/runs/{runs[0].pk}/metrics?keys=a&sample=stride&x_min=3",
        "/api/v1/experiments", "/api/v1/experiments?limit=1", "/api/v1/experiments?tag=a-tag",
        f"/api/v1/experiments?team={runs[0].team_id}", "/api/v1/experiments?search=ex",
        "/api/v1/me", "/api/v1/me?anything=1",
    ]  # fmt: skip
    for path in paths:
        _same(path, raw)
    _same("/api/v1/me", raw, (b"accept", b"application/json; indent=2"))
    _same("/api/v1/runs", raw, (b"accept", b"text/html, */*;q=0.5"))


@pytest.mark.django_db
def test_the_next_pages_answer_as_the_full_path(reads):
    raw, _, _ = reads
    for path in ("/api/v1/runs?limit=1", "/api/v1/experiments?limit=1"):
        seen = 0
        while path:
            mine, full, _, _ = _both(path, raw)
            assert full[0] == 200 and mine == full, path
            seen += 1
            following = __import__("json").loads(full[1])["next"]
            path = following and following.removeprefix("http://127.0.0.1")
        assert seen >= 2, path


@pytest.mark.django_db
def test_what_it_does_not_answer_is_left_to_the_full_path(world, reads):
    raw, runs, other = reads
    run = runs[0]
    member = world.users_a[Role.MEMBER]
    revoked, revoked_raw = api_token_create(actor=world.actor(member), team=world.team_a,
                                            name="old")  # fmt: skip
    ApiToken.objects.filter(pk=revoked.pk).update(revoked_at="2026-01-01T00:00:00Z")
    cases = [
        ("/api/v1/runs", None, (), 401),
        ("/api/v1/runs", "pdk_not_a_token", (), 401),
        ("/api/v1/me", revoked_raw, (), 401),
        (f"/api/v1/runs/{other.pk}", raw, (), 404),  # another team's run
        (f"/api/v1/runs/{other.pk}/metrics?keys=a", raw, (), 404),
        ("/api/v1/runs/99999999", raw, (), 404),
        (f"/api/v1/runs/0{run.pk}", raw, (), 200),  # the URL conf's spelling, not this one's
        ("/api/v1/runs?state=bogus", raw, (), 400),
        ("/api/v1/runs?cursor=bm90IGEgY3Vyc29y", raw, (), 400),
        ("/api/v1/runs?experiment=x", raw, (), 400),
        (f"/api/v1/runs/{run.pk}/metrics?max_points=x", raw, (), 400),
        (f"/api/v1/runs/{run.pk}/metrics?x_min=3&x_max=1", raw, (), 400),
        ("/api/v1/experiments?team=-1", raw, (), 400),
        ("/api/v1/me", raw, (b"accept", b"text/html"), 406),
        ("/api/v1/me?format=xml", raw, (), 404),
        ("/api/v1/me", raw, (b"host", b"evil.example"), 400),
        ("/api/v1/me", raw, (b"cookie", b"sessionid=x"), 200),  # a browser's: the full path
        (f"/api/v1/runs/{run.pk}/checkpoints", raw, (), 200),  # not one of its routes
    ]
    for path, token, headers, status in cases:
        headers = (headers,) if headers else ()
        if headers and headers[0][0] == b"host":
            request = _request(path, token)
            request.META["HTTP_HOST"] = "evil.example"
            assert fast_read(request) is None
            continue
        mine, full, _, _ = _both(path, token, *headers)
        assert mine is None, (path, mine)
        assert full[0] == status, (path, full)
    # a removed member's token: dead on the fast path as on the full one
    Membership.objects.filter(user=member, team=world.team_a).delete()
    mine, full, _, _ = _both("/api/v1/me", raw)
    assert mine is None and full[0] == 401


@pytest.mark.django_db
def test_a_failed_token_is_counted_once(reads, settings):
    """A bad token that the fast path leaves to the full path is counted by the one
    authentication they share (api/authentication.py: request_token), once."""
    from paddock.http import limits

    settings.PADDOCK_RATE_LIMITS = {"auth": (2, 60)}
    limits.cache.clear()
    statuses = []
    for _ in range(3):
        request = _request("/api/v1/runs", "pdk_bad")
        assert fast_read(request) is None
        statuses.append(django_asgi_app.get_response(request).status_code)
    assert statuses == [401, 401, 429]


@pytest.mark.django_db
def test_https_headers_and_the_redirect_are_the_full_paths(reads):
    raw, _, _ = reads
    forwarded = (b"x-forwarded-proto", b"https")
    configured = {
        "SECURE_HSTS_SECONDS": 3600, "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https"),
    }  # fmt: skip
    with override_settings(**configured):
        handler = LanedASGIHandler(lanes=1)
        mine, full, _, _ = _both("/api/v1/me", raw, forwarded, handler=handler)
        assert full[0] == 200 and ("Strict-Transport-Security", "max-age=3600; "
                                   "includeSubDomains") in full[2]  # fmt: skip
        assert mine == full
    with override_settings(SECURE_SSL_REDIRECT=True, **configured):
        handler = LanedASGIHandler(lanes=1)
        mine, full, _, _ = _both("/api/v1/me", raw, handler=handler)  # plain http
        assert mine is None and full[0] == 301
        mine, full, _, _ = _both("/api/v1/me", raw, forwarded, handler=handler)
        assert full[0] == 200 and mine == full
