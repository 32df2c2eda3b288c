"""The ingest endpoint as the ASGI server answers it (live/ingest_asgi.py, around Django's
request cycle): through real uvicorn, the same answers as the Django view, the batch stored
once, its broadcast reaching a websocket viewer, the viewer's rate limit, and the websocket
compression level."""

from __future__ import annotations

import json
import time

import pytest
import requests
from websockets.sync.client import connect

from paddock.experiments.models import IngestBatch, MetricPoint, Run
from paddock.experiments.states import run_transition
from paddock.experiments.tokens import run_token_mint
from paddock.live.consumers import BURST, MIN_INTERVAL_S
from paddock.live.uvicorn_ws import websocket_compression_fast
from paddock.teams.access import actor_for
from paddock.teams.services import api_token_create
from workers.events import MAX_BODY_BYTES

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def job(launched):
    run = Run.objects.get(pk=launched[0]["runs"][0]["id"])
    Run.objects.filter(pk=run.pk).update(dispatch_count=1)
    run_transition(run=run, to_state="dispatching")
    return run, run_token_mint(run=run, dispatch=1)


def metric(step: int, **values: float) -> dict:
    return {"type": "metric", "step": step, "time": 1764490000.0 + step, "values": values}


def test_the_asgi_route_answers_as_the_django_view(asgi_server, job, client):
    run, token = job
    url = f"/api/v1/runs/{run.pk}/ingest"
    auth = {"Authorization": f"Bearer {token}"}
    cases = [
        ({}, b'{"dispatch": 1, "seq": 1, "events": []}'),  # no token
        ({"Authorization": "Bearer pdr_not-a-real-token-at-all"}, b"{}"),
        (auth, b"{not json"),
        (auth, json.dumps({"dispatch": 1, "seq": 1, "events": [
            {"type": "metric", "step": -1, "time": 0, "values": {}}]}).encode()),
        (auth, json.dumps({"dispatch": 2, "seq": 1, "events": []}).encode()),
    ]  # fmt: skip
    for headers, body in cases:
        served = requests.post(asgi_server.url + url, data=body, headers=headers, timeout=10)
        django = client.post(url, body, content_type="application/json",
                             **{f"HTTP_{k.upper()}": v for k, v in headers.items()})  # fmt: skip
        assert (served.status_code, served.json()) == (django.status_code, django.json()), body
        assert served.status_code in (400, 401, 403)
    assert served.json()["field"] == "dispatch"
    assert not IngestBatch.objects.filter(run=run).exists()

    too_big = requests.post(
        asgi_server.url + url, data=b" " * (MAX_BODY_BYTES + 1), headers=auth, timeout=30
    )
    assert too_big.status_code == 413 and too_big.json()["code"] == "batch_too_large"
    # other methods of the path are Django's: the view allows POST only
    assert requests.get(asgi_server.url + url, headers=auth, timeout=10).status_code == 405


def test_a_batch_is_stored_once_and_broadcast_to_viewers(asgi_server, job, world):
    run, token = job
    member = world.users_a["member"]
    _, viewer_token = api_token_create(actor=actor_for(user=member), team=world.team_a, name="v")
    ws_url = f"ws://127.0.0.1:{asgi_server.port}/ws/runs/{run.pk}/"
    bearer = {"Authorization": f"Bearer {viewer_token}"}
    batch = {"dispatch": 1, "seq": 7, "events": [metric(1, loss=0.5), metric(2, loss=0.25)]}
    endpoint = f"{asgi_server.url}/api/v1/runs/{run.pk}/ingest"
    auth = {"Authorization": f"Bearer {token}"}
    with connect(ws_url, origin=asgi_server.url, additional_headers=bearer) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "snapshot"
        reply = requests.post(endpoint, json=batch, headers=auth, timeout=10)
        assert reply.status_code == 200
        assert reply.json() == {"ack": 7, "desired_state": "running"}
        message = json.loads(ws.recv(timeout=5))
        assert message["type"] == "metrics" and message["cursor"] == {"dispatch": 1, "seq": 7}
        assert [s["values"] for s in message["steps"]] == [{"loss": 0.5}, {"loss": 0.25}]
        again = requests.post(endpoint, json=batch, headers=auth, timeout=10)
        assert again.json()["ack"] == 7
    assert IngestBatch.objects.filter(run=run).count() == 1
    stored = MetricPoint.objects.filter(run=run).values_list("key", "step", "value")
    assert sorted(stored) == [("loss", 1, 0.5), ("loss", 2, 0.25)]


def test_a_viewer_gets_a_burst_at_once_then_coalesced_messages(asgi_server, job, world):
    """The consumer's token bucket: the first BURST batches go out as they come (a late batch
    is not held back), the rest are coalesced to one message per MIN_INTERVAL_S; every step
    arrives exactly once."""
    run, token = job
    member = world.users_a["member"]
    _, viewer_token = api_token_create(actor=actor_for(user=member), team=world.team_a, name="v")
    ws_url = f"ws://127.0.0.1:{asgi_server.port}/ws/runs/{run.pk}/"
    bearer = {"Authorization": f"Bearer {viewer_token}"}
    endpoint = f"{asgi_server.url}/api/v1/runs/{run.pk}/ingest"
    auth = {"Authorization": f"Bearer {token}"}
    batches = 12
    with (
        connect(ws_url, origin=asgi_server.url, additional_headers=bearer) as ws,
        requests.Session() as http,
    ):
        assert json.loads(ws.recv(timeout=10))["type"] == "snapshot"
        started = time.monotonic()
        for seq in range(1, batches + 1):
            body = {"dispatch": 1, "seq": seq, "events": [metric(seq, loss=1 / seq)]}
            assert http.post(endpoint, json=body, headers=auth, timeout=10).status_code == 200
        posted = time.monotonic() - started
        messages, steps = [], []
        while len(steps) < batches:
            message = json.loads(ws.recv(timeout=10))
            messages.append((time.monotonic() - started, message))
            steps += [s["step"] for s in message["steps"]]
    assert steps == list(range(1, batches + 1))
    # the first BURST batches, one message each
    assert [len(m["steps"]) for _, m in messages[:BURST]] == [1] * BURST
    # then at most one message per interval (and one more for the bucket's refill)
    allowed = BURST + 1 + int((messages[-1][0]) / MIN_INTERVAL_S)
    assert len(messages) <= allowed, (len(messages), posted)
    assert len(messages) < batches or posted > (batches - BURST) * MIN_INTERVAL_S
    assert messages[-1][1]["cursor"] == {"dispatch": 1, "seq": batches}


def test_websocket_compression_is_cheap_and_still_negotiated(asgi_server, job, world):
    """uvicorn's permessage-deflate at zlib level 1 (live/uvicorn_ws.py): the factory
    uvicorn builds it with gets the level, and a viewer of the real server still negotiates
    compression and reads its messages."""
    from uvicorn.protocols.websockets import websockets_sansio_impl as impl
    from websockets.extensions.permessage_deflate import PerMessageDeflate

    assert websocket_compression_fast() and websocket_compression_fast()  # idempotent
    factory = impl.ServerPerMessageDeflateFactory(compress_settings={"memLevel": 5})
    assert factory.compress_settings == {"memLevel": 5, "level": 1}

    run, _ = job
    member = world.users_a["member"]
    _, viewer_token = api_token_create(actor=actor_for(user=member), team=world.team_a, name="v")
    ws_url = f"ws://127.0.0.1:{asgi_server.port}/ws/runs/{run.pk}/"
    bearer = {"Authorization": f"Bearer {viewer_token}"}
    with connect(ws_url, origin=asgi_server.url, additional_headers=bearer) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "snapshot"
        assert any(isinstance(e, PerMessageDeflate) for e in ws.protocol.extensions)
