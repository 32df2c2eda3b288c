"""Redis (Celery broker, channel layer, cache) killed with -9 and restarted mid-run.

Ingest keeps storing while Redis is down (the broadcast is best effort), a viewer that
reconnects with its cursor receives what it missed, live messages flow again once Redis is
back, and a Celery worker on Paddock's broker settings consumes again without a restart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import requests
from kombu import Connection
from websockets.sync.client import connect

from paddock.experiments.models import MetricPoint, Run
from paddock.experiments.states import run_transition
from paddock.experiments.tokens import run_token_mint
from paddock.teams.models import Role
from paddock.teams.services import api_token_create
from tests.conftest import REPO, AsgiServer, free_port, service_env, wait_for
from tests.reliability.services import ThrowawayRedis

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def redis(tmp_path):
    server = ThrowawayRedis(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


def _metric_batch(seq: int) -> dict:
    event = {"type": "metric", "step": seq, "time": 1764490000.0 + seq, "values": {"loss": seq}}
    return {"dispatch": 1, "seq": seq, "events": [event]}


def _recv_metrics(ws, step: int, timeout: float = 15) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
        if message["type"] == "metrics" and any(s["step"] == step for s in message["steps"]):
            return message
    raise AssertionError(f"no metrics for step {step}")


@pytest.mark.django_db(transaction=True)
def test_ingest_and_the_live_stream_survive_a_redis_restart(redis, launched, world):
    from django.conf import settings

    run = Run.objects.get(pk=launched[0]["runs"][0]["id"])
    Run.objects.filter(pk=run.pk).update(dispatch_count=1)
    run_transition(run=run, to_state="dispatching")
    token = run_token_mint(run=run, dispatch=1)
    user = world.users_a[Role.VIEWER]
    api = api_token_create(actor=world.actor(user), team=world.team_a, name="ws")[1]
    db_name = str(settings.DATABASES["default"]["NAME"])
    server = AsgiServer(free_port(), service_env(PADDOCK_TEST_DB_NAME=db_name,
                                                 REDIS_URL=redis.url))  # fmt: skip
    server.start()
    try:
        ingest = f"{server.url}/api/v1/runs/{run.pk}/ingest"
        auth = {"Authorization": f"Bearer {token}"}
        ws_url = f"ws://127.0.0.1:{server.port}/ws/runs/{run.pk}/"
        bearer = {"Authorization": f"Bearer {api}"}
        with connect(ws_url, origin=server.url, additional_headers=bearer) as ws:
            assert json.loads(ws.recv(timeout=10))["type"] == "snapshot"
            assert requests.post(ingest, json=_metric_batch(1), headers=auth).status_code == 200
            _recv_metrics(ws, 1)

            redis.kill()
            down = requests.post(ingest, json=_metric_batch(2), headers=auth, timeout=30)
            # stored and acknowledged: the broadcast is best effort, the database is the truth
            assert down.status_code == 200, down.text
            assert down.json()["ack"] == 2

        redis.start()  # same port, same append-only file
        # a viewer reconnecting with its last cursor gets what it missed, then live data
        after = f"{ws_url}?after=1:1"

        def reconnected():
            try:
                return connect(after, origin=server.url, open_timeout=5, additional_headers=bearer)
            except Exception:  # the server's Redis pool may need a moment
                return None

        ws = wait_for(reconnected, 30, "a websocket after the Redis restart")
        with ws:
            _recv_metrics(ws, 2)
            assert requests.post(ingest, json=_metric_batch(3), headers=auth).status_code == 200
            _recv_metrics(ws, 3)
        # a retry of the batch sent while Redis was down is not stored twice
        assert requests.post(ingest, json=_metric_batch(2), headers=auth).json()["ack"] == 2
        stored = MetricPoint.objects.filter(run=run).order_by("step")
        steps = list(stored.values_list("step", flat=True))
        assert steps == [1, 2, 3]
    finally:
        server.stop()


def test_a_celery_worker_consumes_again_after_a_redis_restart(redis, tmp_path):
    env = service_env(PROBE_BROKER_URL=redis.url, REDIS_URL=redis.url)
    env["PYTHONPATH"] += os.pathsep + str(REPO)
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tests.reliability.probe_celery", "worker",
         "--pool=solo", "--concurrency=1", "--loglevel=WARNING", "-Q", "probe",
         f"--hostname=probe-{os.getpid()}@%h"],
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        from tests.reliability.probe_celery import app

        app.conf.broker_url = redis.url
        before, during, after = (tmp_path / n for n in ("before", "during", "after"))
        app.send_task("probe.touch", [str(before)], queue="probe")
        wait_for(before.exists, 60, "the worker to run a task")

        redis.kill()
        time.sleep(1)
        redis.start()
        with Connection(redis.url) as conn:  # a task sent right after the restart
            app.send_task("probe.touch", [str(during)], queue="probe", connection=conn)
        app.send_task("probe.touch", [str(after)], queue="probe")
        wait_for(lambda: during.exists() and after.exists(), 45, "the worker to recover")
    finally:
        os.killpg(worker.pid, 15)
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, 9)
