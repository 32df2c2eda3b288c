"""The test servers' helper (tests/serving.py): a server whose port was taken between the
pick and its bind exits before answering, and is started again on another port."""

from __future__ import annotations

import sys

import pytest
import requests

from tests.serving import ServerExited, serving_on_a_free_port


def test_a_server_that_exits_before_answering_is_started_on_another_port(tmp_path):
    ports: list[int] = []

    def argv(port: int) -> list[str]:
        ports.append(port)
        if len(ports) == 1:  # as a server whose port was taken meanwhile: it exits
            return [sys.executable, "-c", "raise SystemExit(3)"]
        return [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]

    with serving_on_a_free_port(argv, ready_path="/", what="http.server", cwd=tmp_path) as url:
        assert requests.get(url, timeout=10).status_code == 200
        assert url.endswith(f":{ports[-1]}")
    assert len(ports) == 2


def test_a_server_that_never_starts_fails_after_its_attempts(tmp_path):
    ports: list[int] = []

    def argv(port: int) -> list[str]:
        ports.append(port)
        return [sys.executable, "-c", "raise SystemExit(3)"]

    exited = pytest.raises(ServerExited, match="exited with code 3 before answering")
    with exited, serving_on_a_free_port(argv, ready_path="/", what="nothing", attempts=2):
        pass
    assert len(ports) == 2
