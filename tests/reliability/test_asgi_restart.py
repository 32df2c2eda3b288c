"""The ASGI server (uvicorn, as in production) restarted while a job reports and a viewer
watches: the job's reporter spools and replays (nothing acknowledged is lost or stored
twice: tests/platform/live/test_live_end_to_end.py), and the viewer, cut off by the
restart, reconnects with the last cursor it saw and resyncs: every step once, none missed,
none twice, with the values the job emitted."""

from __future__ import annotations

import json
import threading
import time

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from paddock.experiments.models import MetricPoint, Run
from paddock.experiments.states import run_transition
from paddock.experiments.tokens import run_token_mint
from paddock.teams.models import Role
from paddock.teams.services import api_token_create
from tests.conftest import wait_for
from workers.report import Reporter, ReporterConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


class Viewer:
    """A websocket viewer that keeps every step it was sent and the last cursor."""

    def __init__(self, url: str, origin: str, token: str):
        self.url, self.origin = url, origin
        self.headers = {"Authorization": f"Bearer {token}"}
        self.steps: list[tuple[int, float]] = []  # (step, loss) in the order received
        self.cursor: dict | None = None

    def _take(self, message: dict) -> None:
        if message.get("cursor"):
            self.cursor = message["cursor"]
        if message["type"] == "metrics":
            self.steps += [(s["step"], s["values"]["loss"]) for s in message["steps"]]

    def open(self, after: dict | None = None):
        query = f"?after={after['dispatch']}:{after['seq']}" if after else ""
        return connect(self.url + query, origin=self.origin, open_timeout=5,
                       additional_headers=self.headers)  # fmt: skip

    def read(self, ws, until) -> None:
        """Take messages until `until()` holds; return at once if the server goes away."""
        deadline = time.monotonic() + 30
        while not until():
            assert time.monotonic() < deadline, f"stalled at {self.steps[-3:]}"
            try:
                self._take(json.loads(ws.recv(timeout=10)))
            except ConnectionClosed:
                return


def test_a_viewer_resyncs_after_an_asgi_restart_without_gap_or_duplicate(
    asgi_server, launched, world, tmp_path
):
    run = Run.objects.get(pk=launched[0]["runs"][0]["id"])
    Run.objects.filter(pk=run.pk).update(dispatch_count=1)
    run_transition(run=run, to_state="dispatching")
    viewer_user = world.users_a[Role.VIEWER]
    api = api_token_create(actor=world.actor(viewer_user), team=world.team_a, name="ws")[1]
    reporter = Reporter(
        ReporterConfig(
            url=asgi_server.url, run_id=run.pk, token=run_token_mint(run=run, dispatch=1),
            dispatch=1, spool_dir=tmp_path / "spool", interval_s=0.2, max_backoff_s=0.5,
        )
    )  # fmt: skip
    emitted: dict[int, float] = {}
    stop = threading.Event()

    def job():
        step = 0
        while not stop.is_set():
            step += 1
            emitted[step] = 1.0 / step
            reporter.metric(step, {"loss": emitted[step]})
            time.sleep(0.02)

    viewer = Viewer(f"ws://127.0.0.1:{asgi_server.port}/ws/runs/{run.pk}/", asgi_server.url, api)
    worker = threading.Thread(target=job)
    try:
        with viewer.open() as ws:
            viewer.read(ws, lambda: viewer.cursor is not None)  # the snapshot
            worker.start()
            viewer.read(ws, lambda: len(viewer.steps) >= 20)  # live
            asgi_server.stop()  # the viewer is cut off mid-stream; the job keeps emitting
            viewer.read(ws, lambda: False)  # what was sent before the close
        live_before = len(viewer.steps)
        spool = tmp_path / "spool"
        wait_for(lambda: list(spool.rglob("*.json")), 60, "batches spooled while it is down")
        asgi_server.start()
        cut_at = dict(viewer.cursor)
        with wait_for(lambda: _try(viewer.open, cut_at), 30, "a reconnect") as ws:
            viewer.read(ws, lambda: max((s for s, _ in viewer.steps), default=0) > live_before)
            stop.set()
            worker.join()
            assert reporter.close(timeout_s=30), "the spool drains once the server is back"
            last = max(emitted)
            viewer.read(ws, lambda: max(s for s, _ in viewer.steps) >= last)
    finally:
        stop.set()
        if worker.is_alive():
            worker.join()
        reporter.close(timeout_s=5)
    received = [s for s, _ in viewer.steps]
    assert received == sorted(set(received)), "a step missed or sent twice"
    assert received == list(range(1, last + 1))
    assert dict(viewer.steps) == emitted
    assert cut_at["seq"] < viewer.cursor["seq"]  # the resync started from the cut
    assert MetricPoint.objects.filter(run=run).count() == last  # stored once each, too


def _try(open_, after):
    try:
        return open_(after)
    except (OSError, ConnectionClosed, TimeoutError):
        return None
