"""HTTP through the platform's ASGI app runs its middleware chain and view in a few
long-lived request threads (paddock/http/lanes.py says why), not in a new thread per request."""

from __future__ import annotations

import asyncio
import inspect
import threading

import pytest
from django.db import connections
from django.db.backends.utils import CursorWrapper

from paddock.teams.access import actor_for
from paddock.teams.models import Role
from paddock.teams.services import api_token_create


async def _get(application, path: str, token: str) -> int:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": b"", "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
        "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {token}".encode())],
    }  # fmt: skip
    messages = [{"type": "http.request", "body": b"", "more_body": False}]
    sent: list[dict] = []

    async def receive():
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # connected until the answer is sent

    async def send(message):
        sent.append(message)

    await application(scope, receive, send)
    return next(m["status"] for m in sent if m["type"] == "http.response.start")


def test_the_middleware_chain_is_built_synchronous():
    from paddock.asgi import django_asgi_app

    assert not inspect.iscoroutinefunction(django_asgi_app._middleware_chain)
    assert len(django_asgi_app.lanes) >= 1


@pytest.mark.django_db(transaction=True)
async def test_concurrent_requests_share_the_lanes_threads(world):
    from asgiref.sync import sync_to_async

    from paddock.asgi import application, django_asgi_app

    def mint() -> str:
        actor = actor_for(user=world.users_a[Role.OWNER])
        token = api_token_create(actor=actor, team=world.team_a, name="lanes")[1]
        connections.close_all()  # this thread's connection, or the test database stays open
        return token

    token = await sync_to_async(mint)()
    threads: set[str] = set()
    execute = CursorWrapper._execute

    def seen(self, sql, *rest):
        threads.add(threading.current_thread().name)
        return execute(self, sql, *rest)

    CursorWrapper._execute = seen
    try:
        before = threading.active_count()
        statuses = await asyncio.gather(*(_get(application, "/api/v1/me", token)
                                          for _ in range(24)))  # fmt: skip
        after = threading.active_count()
    finally:
        CursorWrapper._execute = execute
    assert statuses == [200] * 24
    lanes = {f"http-lane-{i}_0" for i in range(len(django_asgi_app.lanes))}
    assert threads and threads <= lanes, threads
    assert after <= before + len(lanes)  # no thread left behind per request
    assert django_asgi_app.queued == [0] * len(django_asgi_app.lanes)


@pytest.mark.django_db(transaction=True)
async def test_an_answer_is_one_hop_to_its_lane_and_a_streamed_one_still_streams(world):
    """The request's signals, the chain, the view and the close of a rendered answer are one
    call on the lane (Django's handler made three); a streamed answer (a file download, the
    metrics export) is still sent chunk by chunk and closed after."""
    from asgiref.sync import sync_to_async

    from paddock.asgi import application, django_asgi_app
    from paddock.experiments.metrics import metric_points_store
    from paddock.experiments.models import Run
    from tests.platform.conftest import launch

    def setup() -> tuple[str, int]:
        from rest_framework.test import APIClient

        owner = world.users_a[Role.OWNER]
        session = APIClient()
        session.force_login(owner)
        assert launch(session, world.team_a).status_code == 201
        run = Run.objects.get(team=world.team_a)
        metric_points_store(run_id=run.pk, points=[("a", s, 0.0, s * 0.5) for s in range(300)])
        token = api_token_create(actor=actor_for(user=owner), team=world.team_a, name="hops")[1]
        connections.close_all()
        return token, run.pk

    token, run_id = await sync_to_async(setup)()
    hops: list[int] = []
    submits = [lane.submit for lane in django_asgi_app.lanes]

    def counted(i):
        def submit(*args, **kwargs):
            hops.append(i)
            return submits[i](*args, **kwargs)

        return submit

    for i, lane in enumerate(django_asgi_app.lanes):
        lane.submit = counted(i)
    try:
        assert await _get(application, "/api/v1/me", token) == 200
        assert len(hops) == 1, hops
        hops.clear()
        export = f"/api/v1/runs/{run_id}/metrics/export"
        assert await _get(application, export, token) == 200  # ?format= defaults to csv
        assert len(hops) > 2  # the view, its chunks, then the close
    finally:
        for lane, submit in zip(django_asgi_app.lanes, submits, strict=True):
            del lane.submit
            assert lane.submit == submit
    assert django_asgi_app.queued == [0] * len(django_asgi_app.lanes)
