"""Small test doubles and servers shared by the data-plane tests."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class SlowModel:
    """Delegates to an engine's model, sleeping before each forward, so that a test can land
    a pause or a weight update while requests are in flight."""

    def __init__(self, model, delay_s: float):
        self._model, self._delay = model, delay_s

    def __call__(self, *args, **kwargs):
        time.sleep(self._delay)
        return self._model(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)


class ExampleServer:
    """One of examples/'s reference servers (the reward service, the environment server)
    as a real process on a free port, with its fault flags; GET / answers its counts."""

    def __init__(self, script: Path, *flags: str):
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "--port", "0", *flags], stdout=subprocess.PIPE, text=True
        )
        line = self.proc.stdout.readline()  # "listening on http://127.0.0.1:PORT"
        assert line.startswith("listening on "), line
        self.url = line.split()[-1]

    def counts(self) -> dict:
        with urllib.request.urlopen(self.url, timeout=10) as r:
            return json.loads(r.read())

    def requests(self) -> int:
        return self.counts()["requests"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(10)


def server_fixture(script: Path):
    """A fixture starting `script`'s servers (`start(*flags)`), each stopped at the end."""

    @pytest.fixture
    def server():
        started: list[ExampleServer] = []

        def start(*flags: str) -> ExampleServer:
            started.append(ExampleServer(script, *flags))
            return started[-1]

        yield start
        for s in started:
            s.stop()

    return server
