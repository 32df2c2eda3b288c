"""Fixtures shared by the whole suite: real services, started once per test session."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paddock.embedded.up import ray_agent_port_flags
from paddock.environment import create_once

REPO = Path(__file__).resolve().parents[1]


def _ray_token_auth() -> None:
    """Ray token authentication for the whole test session, as `paddock up` runs it. Set
    before anything imports Ray: Ray reads RAY_AUTH_MODE once per process. Every head and
    client of the session (and the workers and servers it starts) use this one token."""
    path = REPO / ".paddock" / "test-ray-auth-token"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        create_once(path, secrets.token_hex(32))  # a session beside this one may race it
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(path)


_ray_token_auth()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def service_env(**extra: str) -> dict[str, str]:
    """The environment a child process of the platform (worker, server) gets in tests:
    the same database, Redis and PADDOCK_HOME as this test session."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "platform"), str(REPO)])
    env.setdefault("DJANGO_SETTINGS_MODULE", "tests.django_settings")
    env.update(extra)
    return env


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


def pytest_sessionfinish(session, exitstatus):
    """Remove this session's artifacts folder (tests/django_settings.py gives each session one;
    an artifacts URI set from outside is left alone)."""
    from tests.django_settings import ARTIFACTS

    if os.environ.get("PADDOCK_ARTIFACTS_URI") == ARTIFACTS.as_uri():
        shutil.rmtree(ARTIFACTS, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    has_gpu = False
    try:
        has_gpu = shutil.which("nvidia-smi") is not None
    except Exception:
        pass
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU; this machine has none")
    for item in items:
        if "gpu" in item.keywords and not has_gpu:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory):
    """One local Ray head for the whole session, on free ports, stopped at the end.
    Yields its Jobs API address (http://127.0.0.1:PORT). Never a bare `ray stop`."""
    with ray_head_running(num_cpus=2, name=f"ray-paddock-{os.getpid()}") as head:
        yield head


@contextlib.contextmanager
def ray_head_running(num_cpus: int, name: str):
    """A local Ray head of `num_cpus` logical CPUs on free ports, its temp dir /tmp/<name>;
    every process it started is killed at the end. Yields its Jobs API and GCS addresses."""
    ray_bin = Path(sys.executable).parent / "ray"
    gcs_port, dash_port = free_port(), free_port()
    temp_dir = Path("/tmp") / name
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    # jobs run `python -m workers.job`: the `python` on the head's PATH must be this one
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--block", f"--port={gcs_port}",
         "--dashboard-host=127.0.0.1", f"--dashboard-port={dash_port}",
         "--include-dashboard=true", "--disable-usage-stats", f"--num-cpus={num_cpus}",
         f"--temp-dir={temp_dir}", *ray_agent_port_flags()],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    address = f"http://127.0.0.1:{dash_port}"

    def up():
        import requests

        try:
            # 401 is an answer too: the dashboard is up and asks for the token
            return requests.get(f"{address}/api/version", timeout=1).status_code in (200, 401)
        except requests.RequestException:
            return False

    try:
        wait_for(up, 120, "the local Ray head")
        yield {"jobs_address": address, "gcs_address": f"127.0.0.1:{gcs_port}", "pid": proc.pid}
    finally:
        import psutil

        family = [proc.pid] + [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=10)  # `ray start --block` may sit out SIGTERM: don't wait long
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        for pid in family:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, django_db_blocker):
    """A real Celery worker process on the session's broker and test database."""
    from django.conf import settings

    from paddock.celery import app

    app.control.purge()  # tasks queued by earlier tests (no worker then) are not ours to run
    db_name = settings.DATABASES["default"]["NAME"]
    env = service_env(PADDOCK_TEST_DB_NAME=str(db_name))
    log = open(Path(os.environ["PADDOCK_HOME"]) / "celery-worker-test.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "paddock", "worker", "--loglevel=INFO",
         "--concurrency=1", "--pool=solo", f"--hostname=test-{os.getpid()}@%h"],
        env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for(lambda: app.control.ping(timeout=0.5), 60, "the Celery worker")
        yield proc
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        log.close()


@pytest.fixture
def asgi_server(django_db_setup, django_db_blocker):
    """A real ASGI server (uvicorn, the production server) on a free port, on the test
    database. Tests that use it write with `django_db(transaction=True)` so the server sees
    their rows. Yields a handle that can stop and restart the server (same port)."""
    from django.conf import settings

    db_name = str(settings.DATABASES["default"]["NAME"])
    server = AsgiServer(port=free_port(), env=service_env(PADDOCK_TEST_DB_NAME=db_name))
    server.start()
    try:
        yield server
    finally:
        server.stop()


class AsgiServer:
    def __init__(self, port: int, env: dict[str, str]):
        self.port = port
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{port}"

    def start(self) -> None:
        import requests

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "paddock.asgi:application", "--host",
             "127.0.0.1", "--port", str(self.port), "--lifespan", "off",
             "--ws", "websockets-sansio", "--log-level", "warning"],
            env=self.env, cwd=REPO, start_new_session=True,
        )  # fmt: skip

        def up():
            try:
                return requests.get(f"{self.url}/healthz", timeout=5).status_code == 200
            except requests.RequestException:
                return False

        wait_for(up, 60, "the ASGI server")

    def stop(self) -> None:
        if self.proc is None:
            return
        os.killpg(self.proc.pid, 15)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        self.proc = None
