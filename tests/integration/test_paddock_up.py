"""`paddock up` as a user runs it: a real subprocess on embedded defaults, then Ctrl-C."""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import requests

from tests.conftest import free_port, wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.integration
@pytest.mark.slow
def test_paddock_up_comes_up_healthy_and_ctrl_c_leaves_no_process(tmp_path):
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "RAY_ADDRESS", "DJANGO_SETTINGS_MODULE")
    }
    env["PADDOCK_HOME"] = str(tmp_path / "home")
    paddock = Path(sys.executable).parent / "paddock"
    proc = subprocess.Popen(
        [str(paddock), "up", "--no-demo", "--port", str(port)],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True, text=True,
    )  # fmt: skip
    family: dict[int, psutil.Process] = {}
    try:

        def healthy():
            assert proc.poll() is None, f"paddock up exited early:\n{proc.stdout.read()}"
            for child in psutil.Process(proc.pid).children(recursive=True):
                family.setdefault(child.pid, child)
            try:
                body = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()
            except (requests.RequestException, ValueError):
                return None
            parts = body["components"]
            return body if all(parts[name]["ok"] for name in parts) else None

        body = wait_for(healthy, 240, "paddock up to report every component healthy", 1.0)
        parts = body["components"]
        assert parts["database"]["vendor"] == "sqlite"  # the embedded default
        assert parts["celery"]["workers"], "a real Celery worker answers"
        assert parts["ray"]["ray_version"], "the local Ray head answers"
        assert (tmp_path / "home" / "paddock.sqlite3").exists()
        assert "admin" in (tmp_path / "home" / "admin-credentials").read_text()
        # /metrics from this machine (no token set): the web and Celery's processes share
        # $PADDOCK_HOME/prometheus, so the beat's reconcile tasks show in the web's scrape
        reconcile = (
            "paddock_celery_task_duration_seconds_count"
            '{task="paddock.clusters.tasks.run_reconcile"}'
        )

        def scraped():
            reply = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
            assert reply.status_code == 200, reply.text[:300]
            return reply.text if reconcile in reply.text else None

        text = wait_for(scraped, 60, "the Celery worker's task series in the web's /metrics")
        assert 'paddock_runs{state="queued"}' in text
        assert list((tmp_path / "home" / "prometheus").glob("*.db"))
        names = " ".join(" ".join(p.cmdline()) for p in family.values() if p.is_running())
        for part in ("uvicorn", "celery", "worker", "beat", "ray", "redis-server"):
            assert part in names, f"no {part} process under paddock up"

        os.kill(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends
        output, _ = proc.communicate(timeout=90)
        assert proc.returncode == 0, output
        assert "stopped" in output
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    def survivors() -> list[str]:
        alive = []
        for p in family.values():
            with contextlib.suppress(psutil.NoSuchProcess):  # it ended while asked
                if p.is_running() and p.status() != "zombie":
                    alive.append(" ".join(p.cmdline()))
        return alive

    with contextlib.suppress(TimeoutError):  # what is left after the wait is named below
        wait_for(lambda: not survivors(), 30, "paddock up's processes to end")
    assert not survivors(), survivors()
