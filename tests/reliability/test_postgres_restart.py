"""PostgreSQL stopped like a crash (`pg_ctl stop -m immediate`) and restarted under a
running ASGI server: a request meanwhile fails cleanly (a 5xx, quickly, nothing stored),
the server recovers by itself, the job's retry is stored exactly once."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import requests

from tests.conftest import REPO, AsgiServer, free_port, service_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]
BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
# PostgreSQL refuses to run as root: there, its tools run as the `postgres` user
AS_OWNER = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


class ThrowawayPostgres:
    def __init__(self, root: Path):
        self.data, self.port = root / "data", free_port()
        self.socket_dir = root
        self.log = root / "log"
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/paddock"

    def _ctl(self, *args: str) -> None:
        subprocess.run([*AS_OWNER, str(BIN[-1] / "pg_ctl"), "-D", str(self.data), "-l",
                        str(self.log), "-w", "-t", "30", *args], check=True,
                       capture_output=True)  # fmt: skip

    def init(self) -> None:
        subprocess.run([*AS_OWNER, str(BIN[-1] / "initdb"), "-D", str(self.data), "-U", "postgres",
                        "--auth=trust", "-E", "UTF8"], check=True, capture_output=True)  # fmt: skip
        self.start()
        subprocess.run([str(BIN[-1] / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                        "-U", "postgres", "paddock"], check=True)  # fmt: skip

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c full_page_writes=off")  # fmt: skip
        self._ctl("-o", options, "start")

    def crash(self) -> None:
        self._ctl("-m", "immediate", "stop")

    def stop(self) -> None:
        subprocess.run([*AS_OWNER, str(BIN[-1] / "pg_ctl"), "-D", str(self.data), "-m",
                        "immediate", "stop"], capture_output=True)  # fmt: skip


@pytest.fixture
def postgres():
    if not BIN:
        pytest.skip("no PostgreSQL binaries under /usr/lib/postgresql")
    root = Path(tempfile.mkdtemp(prefix="paddock-pg-"))
    if AS_OWNER:
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
    server = ThrowawayPostgres(root)
    try:
        server.init()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


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
