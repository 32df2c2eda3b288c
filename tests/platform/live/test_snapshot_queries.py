"""A websocket's connect and snapshot cost a fixed number of queries, however many metric
keys, points, logs and samples the run holds; the snapshot's points are each key's newest
window, as a plain reading of all the points gives them."""

from __future__ import annotations

import asyncio
import json
import threading
from contextlib import contextmanager

import pytest
from django.db import connections
from django.db.backends.utils import CursorWrapper
from django.utils import timezone

from paddock.experiments.metrics import metric_points_store
from paddock.experiments.models import MetricPoint, Run, RunEvent, SampleSet
from paddock.live.snapshots import (
    SNAPSHOT_POINTS,
    recent_points,
    recent_points_rows_portable,
    run_snapshot,
)
from paddock.teams.access import actor_for
from paddock.teams.models import Role
from paddock.teams.services import api_token_create

# the run (1), every key's newest points (1), the logs (1), the sample sets (1)
SNAPSHOT_QUERIES = 4
# the token with the user and role (1), the run's access check (1), the snapshot, read in
# one REPEATABLE READ transaction (its SET TRANSACTION: 1; snapshots.one_moment)
CONNECT_QUERIES = 2 + 1 + SNAPSHOT_QUERIES


@contextmanager
def statements():
    """Every SQL statement run meanwhile, in any thread (a consumer reads in its own)."""
    seen: list[str] = []
    lock = threading.Lock()
    execute = CursorWrapper._execute

    def counted(self, sql, *rest):
        with lock:
            seen.append(sql)
        return execute(self, sql, *rest)

    CursorWrapper._execute = counted
    try:
        yield seen
    finally:
        CursorWrapper._execute = execute


def _grow(run: Run, keys: int, steps: int) -> None:
    points = [(f"k/{k:02d}", s, float(s), s * 0.5 + k) for k in range(keys) for s in range(steps)]
    metric_points_store(run_id=run.pk, points=points)
    for step in range(steps // 100 + 1):
        RunEvent.objects.create(run=run, kind="log", message=f"{step}", time=timezone.now())
        SampleSet.objects.create(run=run, step=step, items=[{"prompt": "p", "completion": "c"}])


@pytest.fixture
def run(launched) -> Run:
    return Run.objects.get(pk=launched[0]["runs"][0]["id"])


def test_the_snapshot_costs_the_same_for_2_or_30_keys(run):
    _grow(run, keys=2, steps=10)
    with statements() as small:
        assert len(run_snapshot(run.pk)["points"]) == 2
    _grow(run, keys=30, steps=SNAPSHOT_POINTS + 50)
    with statements() as large:
        snapshot = run_snapshot(run.pk)
    assert len(snapshot["points"]) == 30
    assert len(small) == len(large) == SNAPSHOT_QUERIES, large


def _reference(run_id: int, per_key: int) -> dict[str, list[list]]:
    """Each key's newest `per_key` points, oldest first, read the plain way."""
    points: dict[str, list[list]] = {}
    for key, step, value, at in (
        MetricPoint.objects.filter(run_id=run_id)
        .order_by("key", "step")
        .values_list("key", "step", "value", "time")
    ):
        points.setdefault(key, []).append([step, value, at])
    return {key: rows[-per_key:] for key, rows in points.items()}


def test_the_newest_window_of_every_key_equals_a_plain_reading(run, launched):
    # keys with fewer, exactly and more points than the window, at scattered steps; another
    # run's points must not leak in
    sizes = {"a": 1, "b": 7, "c": 8, "d": 9, "e/long-name": 40}
    points = [(key, step * 3 + 1, step * 0.25, 100.0 + step) for key, n in sizes.items()
              for step in range(n)]  # fmt: skip
    metric_points_store(run_id=run.pk, points=points)
    other = Run.objects.get(pk=launched[0]["runs"][1]["id"])
    metric_points_store(run_id=other.pk, points=[("a", 1000, 9.0, 1.0), ("z", 1, 1.0, 1.0)])
    expected = _reference(run.pk, 8)
    assert recent_points(run.pk, 8) == expected
    portable: dict[str, list[list]] = {}
    for key, step, value, at in recent_points_rows_portable(run.pk, 8):
        portable.setdefault(key, []).append([step, value, at])
    assert portable == expected
    assert recent_points(run.pk + 10_000, 8) == {}  # a run with no points
    snapshot = run_snapshot(run.pk, points_per_key=8)
    assert snapshot["latest"] == {key: rows[-1][1] for key, rows in expected.items()}


async def _connect_and_snapshot(run_id: int, token: str) -> dict:
    """A websocket's connect, its snapshot and its close, through the platform's ASGI app
    as the server calls it (channels.testing needs daphne, which the platform does not)."""
    from paddock.asgi import application

    path = f"/ws/runs/{run_id}/"
    scope = {
        "type": "websocket", "asgi": {"version": "3.0"}, "path": path,
        "raw_path": path.encode(), "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {token}".encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000), "subprotocols": [],
    }  # fmt: skip
    inbox: asyncio.Queue = asyncio.Queue()
    outbox: asyncio.Queue = asyncio.Queue()
    served = asyncio.create_task(application(scope, inbox.get, outbox.put))
    await inbox.put({"type": "websocket.connect"})
    assert (await asyncio.wait_for(outbox.get(), 10))["type"] == "websocket.accept"
    snapshot = json.loads((await asyncio.wait_for(outbox.get(), 10))["text"])
    await inbox.put({"type": "websocket.disconnect", "code": 1000})
    await asyncio.wait_for(served, 10)
    return snapshot


@pytest.mark.django_db(transaction=True)
async def test_a_websocket_connect_and_snapshot_cost_the_same_for_few_or_many_keys(world):
    from asgiref.sync import sync_to_async

    @sync_to_async
    def prepare():
        from rest_framework.test import APIClient

        from tests.platform.conftest import launch

        owner = world.users_a[Role.OWNER]
        client = APIClient()
        client.force_login(owner)
        reply = launch(client, world.team_a)
        assert reply.status_code == 201, reply.content
        run = Run.objects.get(pk=reply.json()["runs"][0]["id"])
        _, token = api_token_create(actor=actor_for(user=owner), team=world.team_a, name="ws")
        return run, token

    run, token = await prepare()
    await sync_to_async(_grow)(run, 2, 10)
    await _connect_and_snapshot(run.pk, token)  # the token's first use stamps last_used_at
    with statements() as small:
        assert len((await _connect_and_snapshot(run.pk, token))["points"]) == 2
    await sync_to_async(_grow)(run, 30, SNAPSHOT_POINTS + 50)
    with statements() as large:
        assert len((await _connect_and_snapshot(run.pk, token))["points"]) == 30
    assert len(small) == len(large) == CONNECT_QUERIES, large
    await sync_to_async(connections.close_all)()  # the helper thread's, or the test db stays
