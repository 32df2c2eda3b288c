"""Throwaway services for fault tests: started on a private port and data directory, killed
with -9 and restarted on the same port, never the machine's shared ones."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port, wait_for


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return True
    except OSError:
        return False


class ThrowawayRedis:
    """redis-server with an append-only file fsynced on every write, so what it acknowledged
    survives a kill -9 (as a production Redis with AOF would)."""

    def __init__(self, data_dir: Path):
        self.dir = data_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
             str(self.dir), "--appendonly", "yes", "--appendfsync", "always", "--save", "",
             "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        wait_for(lambda: _accepts(self.port), 15, "the throwaway redis-server")

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None
        wait_for(lambda: not _accepts(self.port), 5, "redis to be gone")

    def stop(self) -> None:
        if self.proc is not None:
            self.kill()


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
                   "-c fsync=off -c full_page_writes=off -c max_connections=200")  # fmt: skip
        self._ctl("-o", options, "start")

    def crash(self) -> None:
        self._ctl("-m", "immediate", "stop")

    def stop(self) -> None:
        subprocess.run([*AS_OWNER, str(BIN[-1] / "pg_ctl"), "-D", str(self.data), "-m",
                        "immediate", "stop"], capture_output=True)  # fmt: skip


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL cluster of its own (initdb into a temporary directory, a free port),
    stopped and removed at the end; skips the test where PostgreSQL is not installed."""
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
