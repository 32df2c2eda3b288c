"""The whole platform for the chaos suite, every part its own so that it can be killed:
a throwaway PostgreSQL and Redis (services.py), a Ray head, uvicorn, a Celery worker with
beat, and the proxy through which every job reaches the platform (chaos_proxy.py). The
machine's shared PostgreSQL and Redis are never touched.

`chaos_platform()` starts it and, whatever happens, stops all of it: every process it
started, every Ray job (the head's processes are killed with it) and the data folders."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg
import requests

from tests.conftest import REPO, AsgiServer, free_port, ray_head_running, service_env, wait_for
from tests.reliability.chaos_proxy import IngestProxy
from tests.reliability.services import ThrowawayPostgres, ThrowawayRedis, throwaway_postgres


@dataclass
class ChaosPlatform:
    root: Path
    pg: ThrowawayPostgres
    redis: ThrowawayRedis
    ray: dict[str, Any]
    env: dict[str, str]
    proxy: IngestProxy
    server: AsgiServer
    team: int = 0
    token: str = ""
    worker: subprocess.Popen | None = None
    log: Any = None
    http: requests.Session = field(default_factory=requests.Session)

    # ---- the Celery worker (with beat) ----------------------------------------------------

    def worker_start(self) -> None:
        from celery import Celery

        self.worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "paddock", "worker", "--beat",
             "--loglevel=INFO", "--concurrency=1", "--pool=solo",
             f"--hostname=chaos-{os.getpid()}-{time.monotonic_ns()}@%h",
             "--schedule", str(self.root / "beat-schedule")],
            env=self.env, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        probe = Celery(broker=self.redis.url)

        def answers() -> bool:
            try:
                return bool(probe.control.ping(timeout=0.5))
            except Exception:  # a broker connection cut by the Redis restart before: again
                return False

        try:
            wait_for(answers, 90, "the Celery worker")
        finally:
            probe.close()

    def worker_kill(self) -> None:
        assert self.worker is not None
        os.killpg(self.worker.pid, signal.SIGKILL)
        self.worker.wait(timeout=30)

    # ---- the ASGI server ------------------------------------------------------------------

    def server_kill(self) -> None:
        assert self.server.proc is not None
        os.killpg(self.server.proc.pid, signal.SIGKILL)
        self.server.proc.wait(timeout=30)
        self.server.proc = None

    # ---- a user, through the REST API -----------------------------------------------------

    def api(self, method: str, path: str, body: dict | None = None, patience_s: float = 120):
        """A user's request, retried as a person would while the platform is down or
        answers 5xx (PostgreSQL restarting, the server killed). Returns the reply."""
        deadline = time.monotonic() + patience_s
        while True:
            try:
                reply = self.http.request(
                    method, f"{self.server.url}/api/v1/{path}", json=body, timeout=30,
                    headers={"Authorization": f"Bearer {self.token}"},
                )  # fmt: skip
                if reply.status_code < 500:
                    return reply
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method} {path}: no answer below 500 in {patience_s} s")
            time.sleep(1)

    # ---- the database, read by the test --------------------------------------------------

    def query(self, sql: str, args: tuple = (), patience_s: float = 120) -> list[tuple]:
        deadline = time.monotonic() + patience_s
        while True:
            try:
                with psycopg.connect(self.pg.url, connect_timeout=5) as conn:
                    return conn.execute(sql, args).fetchall()
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    # ---- processes of the Ray head --------------------------------------------------------

    def head_processes(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.ray["pid"]).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def drivers(self) -> dict[tuple[int, int], psutil.Process]:
        """(run id, dispatch) -> the job's driver (`python -m workers.job`, told apart by
        the environment dispatch gave it), among this head's processes only: other test
        sessions on the machine run jobs of the same run ids."""
        found = {}
        for proc in self.head_processes():
            try:
                cmdline = proc.cmdline()
                if "-m" not in cmdline or "workers.job" not in cmdline:
                    continue
                env = proc.environ()
                found[(int(env["PADDOCK_RUN_ID"]), int(env["PADDOCK_DISPATCH"]))] = proc
            except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError, ValueError):
                continue
        return found

    def job_processes(self) -> list[tuple[int, str]]:
        """Every process on the machine a job of this platform started (its environment
        names this platform's proxy and a run), wherever it was reparented: a driver, or an
        engine process whose driver was killed. (pid, command line)."""
        found = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                env, cmdline = proc.environ(), " ".join(proc.info["cmdline"] or [])
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            ours = env.get("PADDOCK_PUBLIC_URL") == self.proxy.url and "PADDOCK_RUN_ID" in env
            if ours and ("workers.job" in cmdline or "multiprocessing" in cmdline):
                found.append((proc.pid, cmdline[:200]))
        return found

    @staticmethod
    def engine_of(driver: psutil.Process) -> psutil.Process | None:
        """The rollout engine process of a run with `resources.engine_process` (a spawned
        child of the driver; not multiprocessing's resource tracker)."""
        try:
            for child in driver.children():
                cmdline = " ".join(child.cmdline())
                if "multiprocessing" in cmdline and "resource_tracker" not in cmdline:
                    return child
        except psutil.NoSuchProcess:
            pass
        return None

    def jobs(self) -> list[Any]:
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.ray["jobs_address"]).list_jobs()


def _kill_group(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@contextlib.contextmanager
def chaos_platform(root: Path, job_slots: int) -> Iterator[ChaosPlatform]:
    root.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(throwaway_postgres())
        redis = ThrowawayRedis(root / "redis")
        redis.start()
        stack.callback(redis.stop)
        ray = stack.enter_context(
            ray_head_running(num_cpus=job_slots, name=f"ray-paddock-chaos-{os.getpid()}")
        )
        server = AsgiServer(free_port(), {})
        proxy = IngestProxy(upstream_port=server.port)
        stack.callback(proxy.close)
        env = service_env(
            DATABASE_URL=pg.url,
            REDIS_URL=redis.url,
            PADDOCK_PUBLIC_URL=proxy.url,  # what jobs are told: every job goes through it
            PADDOCK_ARTIFACTS_URI=(root / "artifacts").as_uri(),
            PADDOCK_TEST_SESSION=f"chaos-{os.getpid()}",
        )
        env.pop("PADDOCK_TEST_DB_NAME", None)
        seeded = subprocess.run(
            [sys.executable, str(REPO / "tests/reliability/pg_seed.py"), "platform",
             ray["jobs_address"]],
            env=env, cwd=REPO, capture_output=True, text=True, check=True,
        )  # fmt: skip
        platform_ids = json.loads(seeded.stdout.splitlines()[-1])
        server.env = env
        server.start()
        stack.callback(lambda: _kill_group(server.proc))
        log = stack.enter_context(open(root / "celery-worker.log", "ab"))
        chaos = ChaosPlatform(
            root=root, pg=pg, redis=redis, ray=ray, env=env, proxy=proxy, server=server,
            team=platform_ids["team"], token=platform_ids["token"], log=log,
        )  # fmt: skip
        stack.callback(lambda: _kill_group(chaos.worker))
        chaos.worker_start()
        yield chaos
