"""A server process for a test: started in its own process group, waited for until a URL
answers, and stopped with its children (SIGTERM, then SIGKILL after a grace)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import requests

from tests.conftest import wait_for


def stop_group(proc: subprocess.Popen, grace_s: float = 20) -> None:
    os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()


def answers(url: str, headers: Mapping[str, str] | None = None, timeout: float = 2) -> bool:
    try:
        return requests.get(url, headers=headers, timeout=timeout).status_code == 200
    except requests.RequestException:
        return False


@contextmanager
def serving(argv: list[str], *, ready_url: str, what: str, env: Mapping[str, str] | None = None,
            cwd: Path | None = None, log: Path | None = None, headers=None,
            timeout_s: float = 120) -> Iterator[subprocess.Popen]:  # fmt: skip
    """Run `argv` until the block ends; the block starts once `ready_url` answers 200."""
    out = open(log, "wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(argv, env=None if env is None else dict(env), cwd=cwd, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        wait_for(lambda: answers(ready_url, headers), timeout_s, what)
        yield proc
    finally:
        stop_group(proc)
        if log:
            out.close()
