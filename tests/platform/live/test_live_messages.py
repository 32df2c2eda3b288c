"""Every message of the live stream is its model of workers/live_messages.py, byte for byte:
through real uvicorn, a real websocket client and the real ingest endpoint, each text a
viewer receives (snapshot, metrics, log, samples, checkpoint, state, alarms, the replay of
a reconnect, an error) validates as `ServerMessage` and is exactly what the model writes
(fields, their order, nothing left out or added)."""

from __future__ import annotations

import json
import math
import time

import pytest
import requests
from django.conf import settings
from pydantic import TypeAdapter
from websockets.sync.client import connect

from paddock.experiments.alarms import run_alarms_judge
from paddock.experiments.metrics import metric_points_store
from paddock.experiments.models import Run
from paddock.experiments.states import run_transition
from paddock.experiments.tokens import run_token_mint
from paddock.teams.access import actor_for
from paddock.teams.services import api_token_create
from workers.live_messages import ControlMessage, ServerMessage

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
MESSAGES = TypeAdapter(ServerMessage)


def _checked(text: str) -> dict:
    """The message, after checking that its model writes exactly this text."""
    message = MESSAGES.validate_json(text)
    assert json.dumps(MESSAGES.dump_python(message)) == text
    return json.loads(text)


def _until(ws, wanted: set[str], timeout: float = 15.0) -> list[dict]:
    """Messages (each checked) until one of each type in `wanted` has come."""
    got, deadline = [], time.monotonic() + timeout
    while wanted - {m["type"] for m in got}:
        assert time.monotonic() < deadline, f"no {wanted - {m['type'] for m in got}} came"
        got.append(_checked(ws.recv(timeout=max(0.05, deadline - time.monotonic()))))
    return got


def test_every_server_message_is_its_model_byte_for_byte(asgi_server, launched, world):
    run = Run.objects.get(pk=launched[0]["runs"][0]["id"])
    Run.objects.filter(pk=run.pk).update(dispatch_count=1)
    run_transition(run=run, to_state="dispatching")
    job = {"Authorization": f"Bearer {run_token_mint(run=run, dispatch=1)}"}
    ingest = f"{asgi_server.url}/api/v1/runs/{run.pk}/ingest"
    member = world.users_a["member"]
    token = api_token_create(actor=actor_for(user=member), team=world.team_a, name="ws")[1]
    ws_url = f"ws://127.0.0.1:{asgi_server.port}/ws/runs/{run.pk}/"
    bearer = {"Authorization": f"Bearer {token}"}
    t = 1764490000.0
    store = settings.PADDOCK_ARTIFACTS_URI.rstrip("/")
    first = [
        {"type": "status", "state": "running", "detail": "started", "time": t},
        {"type": "metric", "step": 1, "time": t + 1, "values": {"reward/mean": 0.25, "kl": 1}},
        {"type": "log", "time": t + 2, "level": "warning", "message": "a line"},
    ]
    assert requests.post(ingest, json={"dispatch": 1, "seq": 0, "events": first},
                         headers=job, timeout=10).status_code == 200  # fmt: skip

    with connect(ws_url, origin=asgi_server.url, additional_headers=bearer) as ws:
        [snapshot] = _until(ws, {"snapshot"})
        assert snapshot["points"]["reward/mean"] == [[1, 0.25, t + 1]]
        assert snapshot["run"]["state"] == "running"
        assert {row["kind"] for row in snapshot["logs"]} == {"log", "status"}
        later = [
            {"type": "metric", "step": 2, "time": t + 3, "values": {"reward/mean": 0.5}},
            {"type": "log", "time": t + 4, "level": "info", "message": "another line"},
            {"type": "samples", "step": 2, "items": [{"prompt": "1+1=", "completion": "2",
                                                     "reward": 1.0, "advantage": 0.5}]},
            {"type": "checkpoint", "step": 2, "uri": f"{store}/runs/{run.pk}/step-2",
             "adapter_version": 2},
        ]  # fmt: skip
        assert requests.post(ingest, json={"dispatch": 1, "seq": 1, "events": later},
                             headers=job, timeout=10).status_code == 200  # fmt: skip
        live = _until(ws, {"metrics", "log", "samples", "checkpoint"})
        log = next(m for m in live if m["type"] == "log")
        assert isinstance(log["id"], int) and log["kind"] == "log"
        assert all(m["cursor"] == {"dispatch": 1, "seq": 1} for m in live)
        ws.send(json.dumps({"action": "fly"}))
        [error] = [m for m in _until(ws, {"error"}) if m["type"] == "error"]
        assert (error["code"], error["field"]) == ("invalid_action", None)
        ws.send(ControlMessage(action="pause").model_dump_json())
        state = [m for m in _until(ws, {"state"}) if m["type"] == "state"][-1]
        assert (state["state"], state["desired_state"]) == ("pausing", "paused")

    # a reconnect after the first batch: the second batch's steps and lines, then the state
    after = f"{ws_url}?after=1:0"
    with connect(after, origin=asgi_server.url, additional_headers=bearer) as ws:
        replay = _until(ws, {"metrics", "log", "state"})
    assert [m["type"] for m in replay][-1] == "state"
    steps = next(m for m in replay if m["type"] == "metrics")["steps"]
    assert [s["step"] for s in steps] == [2]
    assert [m["message"] for m in replay if m["type"] == "log"][0] == "another line"

    # an alarm begins firing (the beat's judgement, here in the test's process)
    with connect(ws_url, origin=asgi_server.url, additional_headers=bearer) as ws:
        _until(ws, {"snapshot"})
        collapse = [("entropy", s, t, 1.5 * math.exp(-max(0, s - 40) / 4)) for s in range(3, 81)]
        metric_points_store(run_id=run.pk, points=collapse)
        Run.objects.filter(pk=run.pk).update(step=80)
        run_alarms_judge(run_id=run.pk)
        alarms = [m for m in _until(ws, {"alarms"}) if m["type"] == "alarms"][-1]
    assert [a["name"] for a in alarms["alarms"] if a["firing"]] == ["entropy_collapse"]
