"""A server process for a test: started in its own process group, waited for until a URL
answers, and stopped with its children (SIGTERM, then SIGKILL after a grace).

A port picked free ahead of a slow start (MLflow takes 20 s to bind) may be taken
meanwhile by the other pytest session or a Ray worker: `serving_on_a_free_port` starts
the server again on another port when it exits before answering."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path

import requests

from tests.conftest import free_port, wait_for


class ServerExited(RuntimeError):
    """The server process ended before its URL answered."""


def stop_group(proc: subprocess.Popen, grace_s: float = 20) -> None:
    try:
        os.killpg(proc.pid, 15)
    except ProcessLookupError:  # the group has ended already
        proc.wait()
        return
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

    def ready() -> bool:
        if proc.poll() is not None:
            raise ServerExited(f"{what} exited with code {proc.returncode} before answering")
        return answers(ready_url, headers)

    try:
        wait_for(ready, timeout_s, what)
        yield proc
    finally:
        stop_group(proc)
        if log:
            out.close()


@contextmanager
def serving_on_a_free_port(argv_for: Callable[[int], list[str]], *, ready_path: str, what: str,
                           attempts: int = 3, **kw) -> Iterator[str]:  # fmt: skip
    """`serving(argv_for(port))` on a free port; the block gets its base URL. A server that
    exits before answering (its port taken meanwhile) is started again on another port."""
    for attempt in range(1, attempts + 1):
        url = f"http://127.0.0.1:{free_port()}"
        with ExitStack() as stack:
            try:
                argv = argv_for(int(url.rsplit(":", 1)[1]))
                stack.enter_context(serving(argv, ready_url=url + ready_path, what=what, **kw))
            except ServerExited:
                if attempt == attempts:
                    raise
                continue
            yield url
            return
