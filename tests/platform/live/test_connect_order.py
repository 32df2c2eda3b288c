"""A run stream's first connect joins the run's group before its access check (one hop for
the check and the snapshot): a message broadcast meanwhile never reaches a refused socket,
and reaches an allowed one after its snapshot, not before."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections

from paddock.experiments.models import Run
from paddock.live import consumers
from paddock.live.broadcast import _send_async
from paddock.teams.access import actor_for
from paddock.teams.models import Role
from paddock.teams.services import api_token_create


def _state(run: Run) -> dict:
    return {"type": "run.state", "run_id": run.pk, "cursor": {"dispatch": 9, "seq": 9},
            "state": "running"}  # fmt: skip


async def _connect(run: Run, token: str) -> list[dict]:
    """What the socket is sent, until 1 s after its first message (a close included: a
    message sent after it would be a leak)."""
    from paddock.asgi import application

    path = f"/ws/runs/{run.pk}/"
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
    sent = []
    while True:
        try:
            message = await asyncio.wait_for(outbox.get(), 10 if not sent else 1)
        except TimeoutError:
            break
        sent.append(message)
    await inbox.put({"type": "websocket.disconnect", "code": 1000})
    await asyncio.wait_for(served, 10)
    return sent


@pytest.mark.django_db(transaction=True)
async def test_a_broadcast_during_the_check_reaches_only_an_allowed_socket_after_its_snapshot(
    world, monkeypatch
):
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
        mine = api_token_create(actor=actor_for(user=owner), team=world.team_a, name="a")[1]
        other = world.users_b[Role.OWNER]
        theirs = api_token_create(actor=actor_for(user=other), team=world.team_b, name="b")[1]
        return run, mine, theirs

    run, mine, theirs = await prepare()
    check = consumers.RunStreamConsumer._snapshot_if_allowed

    def broadcast_then_check(self):
        # in the consumer's database thread, while its connect waits for this hop
        async_to_sync(_send_async)(run.pk, run.experiment_id, _state(run))
        return check(self)

    monkeypatch.setattr(consumers.RunStreamConsumer, "_snapshot_if_allowed", broadcast_then_check)
    refused = await _connect(run, theirs)
    assert [m["type"] for m in refused] == ["websocket.close"], refused
    allowed = await _connect(run, mine)
    kinds = [m["type"] for m in allowed]
    assert kinds[:2] == ["websocket.accept", "websocket.send"], kinds
    assert '"type": "snapshot"' in allowed[1]["text"]
    assert any('"state"' in m.get("text", "") for m in allowed[2:]), allowed[2:]
    await sync_to_async(connections.close_all)()
