"""Throwaway services for fault tests: started on a private port and data directory, killed
with -9 and restarted on the same port, never the machine's shared ones."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

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
