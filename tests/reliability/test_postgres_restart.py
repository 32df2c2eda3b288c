"""PostgreSQL stopped like a crash (`pg_ctl stop -m immediate`) and restarted under a
running ASGI server: a request meanwhile fails cleanly (a 5xx, quickly, nothing stored),
the server recovers by itself, the job's retry is stored exactly once."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import requests

from tests.conftest import REPO, AsgiServer, free_port, service_env
from tests.reliability.services import throwaway_postgres

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def postgres():
    with throwaway_postgres() as server:
        yield server


def _batch(seq: int) -> dict:
    event = {"type": "metric", "step": seq, "time": 1764490000.0, "values": {"loss": 1.0}}
    return {"dispatch": 1, "seq": seq, "events": [event]}


def test_requests_fail_cleanly_while_postgres_is_down_and_recover(postgres, tmp_path):
    env = service_env(DATABASE_URL=postgres.url, PADDOCK_HOME=str(tmp_path / "home"))
    env.pop("PADDOCK_TEST_DB_NAME", None)
    seeder = [sys.executable, str(REPO / "tests/reliability/pg_seed.py")]
    seeded = subprocess.run([*seeder, "seed"], env=env, cwd=REPO, capture_output=True,
                            text=True, check=True)  # fmt: skip
    run_id, token = seeded.stdout.split()[-2:]
    server = AsgiServer(free_port(), env)
    server.start()
    try:
        ingest = f"{server.url}/api/v1/runs/{run_id}/ingest"
        auth = {"Authorization": f"Bearer {token}"}
        assert requests.post(ingest, json=_batch(1), headers=auth, timeout=30).status_code == 200
        postgres.crash()
        down = requests.post(ingest, json=_batch(2), headers=auth, timeout=30)
        assert down.status_code >= 500  # the reporter retries a 5xx
        assert requests.get(f"{server.url}/healthz", timeout=30).status_code >= 500
        postgres.start()
        for seq in (2, 2, 3):  # the retry of 2 (twice: a lost reply), then the next batch
            reply = requests.post(ingest, json=_batch(seq), headers=auth, timeout=30)
            assert reply.status_code == 200 and reply.json()["ack"] == seq, reply.text
    finally:
        server.stop()
    stored = subprocess.run([*seeder, "rows", run_id], env=env, cwd=REPO, capture_output=True,
                            text=True, check=True)  # fmt: skip
    assert json.loads(stored.stdout.splitlines()[-1]) == {"batches": [1, 2, 3], "steps": [1, 2, 3]}
