"""The live path end to end, with real parts: uvicorn serving the ASGI app, a real websocket
client, the real Reporter of `workers` posting to the real ingest endpoint, PostgreSQL and
Redis (the channel layer) underneath."""

from __future__ import annotations

import json
import threading
import time

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from paddock.experiments.models import MetricPoint, Run
from paddock.experiments.states import run_transition
from paddock.experiments.tokens import run_token_mint
from paddock.teams.access import actor_for
from paddock.teams.services import api_token_create
from tests.conftest import wait_for
from workers.report import Reporter, ReporterConfig

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


class FakeJobControl:
    """What a job's driver does with the desired state of each ingest reply: acknowledge
    it with a status event (the real driver checkpoints first; that is not under test)."""

    def __init__(self):
        self.reporter: Reporter | None = None
        self.seen: list[str] = []

    def __call__(self, desired: str) -> None:
        self.seen.append(desired)
        reported = {"paused": "paused", "running": "running", "aborted": "aborted"}[desired]
        self.reporter.status(reported, detail=f"job acknowledges {desired}")


def _dispatched_run(launched) -> Run:
    run = Run.objects.get(pk=launched[0]["runs"][0]["id"])
    Run.objects.filter(pk=run.pk).update(dispatch_count=1)
    run_transition(run=run, to_state="dispatching")
    return run


def _token(world, user, team) -> str:
    return api_token_create(actor=actor_for(user=user), team=team, name="ws")[1]


def _recv_until(ws, predicate, timeout: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = json.loads(ws.recv(timeout=max(0.05, deadline - time.monotonic())))
        if predicate(message):
            return message
    raise AssertionError("expected message not received")


def test_metrics_stream_and_controls_reach_the_job_and_every_viewer(
    asgi_server, launched, world, tmp_path
):
    run = _dispatched_run(launched)
    member = world.users_a["member"]
    token = _token(world, member, world.team_a)
    control = FakeJobControl()
    config = ReporterConfig(
        url=asgi_server.url, run_id=run.pk, token=run_token_mint(run=run, dispatch=1),
        dispatch=1, spool_dir=tmp_path / "spool", interval_s=0.3,
    )  # fmt: skip
    reporter = Reporter(config, on_desired_state=control)
    control.reporter = reporter
    ws_url = f"ws://127.0.0.1:{asgi_server.port}/ws/runs/{run.pk}/"
    bearer = {"Authorization": f"Bearer {token}"}
    origin = asgi_server.url
    try:
        reporter.status("running", detail="started")
        with (
            connect(ws_url, origin=origin, additional_headers=bearer) as ws,
            connect(ws_url, origin=origin, additional_headers=bearer) as viewer,
        ):
            snapshot = json.loads(ws.recv(timeout=10))
            assert snapshot["type"] == "snapshot" and snapshot["run_id"] == run.pk
            json.loads(viewer.recv(timeout=10))
            for step in range(1, 4):
                reporter.metric(step, {"reward/mean": step / 10})
            got = _recv_until(ws, lambda m: m["type"] == "metrics" and m["steps"][-1]["step"] == 3)
            assert got["steps"][-1]["values"] == {"reward/mean": 0.3}

            for action, final in (("pause", "paused"), ("resume", "running"),
                                  ("abort", "aborted")):  # fmt: skip
                ws.send(json.dumps({"action": action}))
                # the job learns it from its next ingest reply, acknowledges, and both
                # viewers see the new state
                for client in (ws, viewer):
                    _recv_until(client, lambda m, f=final: m["type"] == "state" and m["state"] == f)
            # the first reply tells the job it should be running; then each control in turn
            assert control.seen == ["running", "paused", "running", "aborted"]
        run.refresh_from_db()
        assert run.state == "aborted"
        assert MetricPoint.objects.filter(run=run).count() == 3
    finally:
        reporter.close(timeout_s=5)


def test_a_viewer_of_another_team_is_refused(asgi_server, launched, world):
    run = _dispatched_run(launched)
    outsider_token = _token(world, world.users_b["owner"], world.team_b)
    url = f"ws://127.0.0.1:{asgi_server.port}/ws/runs/{run.pk}/"
    outsider = {"Authorization": f"Bearer {outsider_token}"}
    with pytest.raises(InvalidStatus) as refused:
        connect(url, origin=asgi_server.url, additional_headers=outsider).recv(timeout=5)
    assert refused.value.response.status_code == 403
    anonymous = f"ws://127.0.0.1:{asgi_server.port}/ws/runs/{run.pk}/"
    with pytest.raises(InvalidStatus):
        connect(anonymous, origin=asgi_server.url).recv(timeout=5)


def test_a_viewer_may_watch_but_not_control(asgi_server, launched, world):
    run = _dispatched_run(launched)
    token = _token(world, world.users_a["viewer"], world.team_a)
    url = f"ws://127.0.0.1:{asgi_server.port}/ws/runs/{run.pk}/"
    bearer = {"Authorization": f"Bearer {token}"}
    with connect(url, origin=asgi_server.url, additional_headers=bearer) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "snapshot"
        ws.send(json.dumps({"action": "abort"}))
        error = _recv_until(ws, lambda m: m["type"] == "error")
        assert error["code"] == "permission_denied"
    run.refresh_from_db()
    assert run.desired_state == "running"


def test_the_platform_restarted_mid_run_loses_and_duplicates_nothing(
    asgi_server, launched, tmp_path
):
    run = _dispatched_run(launched)
    config = ReporterConfig(
        url=asgi_server.url, run_id=run.pk, token=run_token_mint(run=run, dispatch=1),
        dispatch=1, spool_dir=tmp_path / "spool", interval_s=0.2, max_backoff_s=0.5,
    )  # fmt: skip
    reporter = Reporter(config)
    emitted = {}
    stop = threading.Event()

    def job():
        step = 0
        while not stop.is_set():
            step += 1
            values = {"loss": 1.0 / step, "reward/mean": step * 0.01}
            emitted.update({(k, step): v for k, v in values.items()})
            reporter.metric(step, values)
            time.sleep(0.01)

    def emitted_past(n: int):  # the job has emitted n more points (it emits on its own)
        return lambda: len(emitted) >= n

    worker = threading.Thread(target=job)
    worker.start()
    try:
        wait_for(emitted_past(60), 60, "the job's first points")
        asgi_server.stop()  # the platform goes away mid-run; the job keeps emitting
        spool = tmp_path / "spool"
        wait_for(lambda: list(spool.rglob("*.json")), 60, "batches spooled while it is down")
        asgi_server.start()
        wait_for(emitted_past(len(emitted) + 60), 60, "points emitted after the restart")
    finally:
        stop.set()
        worker.join()
    assert reporter.close(timeout_s=30), "the spool drains once the platform is back"
    stored = {(k, s): v for k, s, v in MetricPoint.objects.filter(run=run).values_list(
        "key", "step", "value")}  # fmt: skip
    assert len(emitted) > 100
    assert stored == emitted
    assert not list((tmp_path / "spool").rglob("*.json"))
