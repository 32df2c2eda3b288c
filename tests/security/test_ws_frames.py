"""Malformed websocket frames never crash the stream: each gets an error message (or is
ignored) and the same connection keeps answering. Control stays with roles that may."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async

from paddock.experiments.models import Run
from paddock.teams.models import Role
from paddock.teams.services import api_token_create
from tests.security.wsclient import Ws

pytestmark = pytest.mark.django_db(transaction=True)

FRAMES = [
    "not json",
    "",
    "{",
    "[]",
    "null",
    "42",
    '"abort"',
    json.dumps({"action": 5}),
    json.dumps({"action": ["abort"]}),
    json.dumps({"action": {"abort": 1}}),
    json.dumps({"action": "ABORT"}),
    json.dumps({"action": "drop tables", "run_id": 1}),
    json.dumps({"action": "x" * 1_000_000}),
    "[" * 100_000 + "]" * 100_000,  # deeper than json's recursion limit
    '{"action": "\udcff"}',
    json.dumps({"action": "pause", "extra": {"a": [1] * 10_000}}),  # too large to read
]


async def _token(world, role: str) -> str:
    user = world.users_a[role]
    return await database_sync_to_async(
        lambda: api_token_create(actor=world.actor(user), team=world.team_a, name="ws")[1]
    )()


async def _still_answers(ws: Ws) -> None:
    await ws.send_text(json.dumps({"action": "nothing"}))
    reply = await ws.receive_json()
    assert reply["type"] == "error" and reply["code"] == "invalid_action"


async def test_malformed_frames_get_an_error_and_the_stream_lives_on(world, launched):
    run_id = launched[0]["runs"][0]["id"]
    token = await _token(world, Role.OWNER)
    ws = Ws(f"/ws/runs/{run_id}/", token=token)
    assert (await ws.connect())[0]
    assert (await ws.receive_json())["type"] == "snapshot"
    for frame in FRAMES:
        await ws.send_text(frame)
        reply = await ws.receive_json()
        assert reply["type"] == "error" and reply["code"] in ("invalid_action", "invalid_json"), (
            frame[:40], reply)  # fmt: skip
        await _still_answers(ws)
    await ws.send_bytes(b"\xff\xfe binary")
    assert (await ws.receive_json())["type"] == "error"
    await _still_answers(ws)
    await ws.close()
    run = await database_sync_to_async(Run.objects.get)(pk=run_id)
    assert run.desired_state == "running"


async def test_an_experiment_stream_controls_only_its_own_runs_and_only_for_members(
    world, launched
):
    first = launched[0]["runs"][0]["id"]
    experiment_id = await database_sync_to_async(lambda: Run.objects.get(pk=first).experiment_id)()
    b_run = launched[1]["runs"][0]["id"]
    for role, code in ((Role.VIEWER, "permission_denied"), (Role.MEMBER, "invalid_run")):
        ws = Ws(f"/ws/experiments/{experiment_id}/", token=await _token(world, role))
        assert (await ws.connect())[0]
        for _ in launched[0]["runs"]:
            assert (await ws.receive_json())["type"] == "snapshot"
        targets = [launched[0]["runs"][0]["id"]] if role == Role.VIEWER else [b_run, "1", 2**62]
        for target in targets:
            await ws.send_text(json.dumps({"action": "abort", "run_id": target}))
            reply = await ws.receive_json()
            assert reply["type"] == "error" and reply["code"] == code, reply
        # past 64 bits a frame is refused by the one JSON reader (core/jsonbody.py)
        await ws.send_text(json.dumps({"action": "abort", "run_id": 2**80}))
        reply = await ws.receive_json()
        assert reply["code"] == "invalid_json" and "64-bit" in reply["message"], reply
        await ws.close()
    states = await database_sync_to_async(
        lambda: set(Run.objects.values_list("desired_state", flat=True))
    )()
    assert states == {"running"}
