"""A small supervisor: start child processes in their own sessions, stop them all.

Each child leads its own process group, so a terminal's Ctrl-C reaches only `paddock up`,
which then stops the children in reverse order of start (the web server before the broker
it talks to) and finally kills any descendant that outlived its parent (Ray's helpers)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil


@dataclass
class Child:
    name: str
    popen: subprocess.Popen
    log_path: Path


@dataclass
class Supervisor:
    log_dir: Path
    children: list[Child] = field(default_factory=list)
    _known: dict[int, psutil.Process] = field(default_factory=dict)

    def start(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> Child:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log = log_path.open("ab")
        popen = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()  # the child holds its own descriptor
        child = Child(name, popen, log_path)
        self.children.append(child)
        return child

    def remember_descendants(self) -> None:
        """Record every process below us: one that reparents itself after its parent dies
        (a raylet, a dashboard agent) is still ours to stop."""
        for proc in psutil.Process().children(recursive=True):
            self._known.setdefault(proc.pid, proc)

    def exited(self) -> Child | None:
        return next((c for c in self.children if c.popen.poll() is not None), None)

    def stop_all(self, grace_s: float = 15.0) -> None:
        self.remember_descendants()
        for child in reversed(self.children):
            _signal_group(child.popen.pid, signal.SIGTERM)
            _wait(child.popen, grace_s)
            _signal_group(child.popen.pid, signal.SIGKILL)
        survivors = [p for p in self._known.values() if _alive(p)]
        for proc in survivors:
            proc.terminate()
        _, still = psutil.wait_procs(survivors, timeout=5)
        for proc in still:
            proc.kill()
        psutil.wait_procs(still, timeout=5)
        for child in self.children:
            child.popen.poll()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait(popen: subprocess.Popen, timeout: float) -> None:
    try:
        popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until(predicate, timeout_s: float, interval_s: float = 0.25, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
