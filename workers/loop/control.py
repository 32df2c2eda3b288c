"""Where the driver learns what a user wants: running, paused or aborted.

The driver reads it between train steps and before each rollout batch. The HTTP reporter
implements it from the `desired_state` of each ingest reply; tests and the CLI use the
simple ones here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

DesiredState = Literal["running", "paused", "aborted"]
_STATES = ("running", "paused", "aborted")


class ControlSource(Protocol):
    def desired_state(self) -> DesiredState: ...


class StaticControl:
    """A settable desired state (tests, and the default: always running)."""

    def __init__(self, state: DesiredState = "running"):
        self.state: DesiredState = state

    def desired_state(self) -> DesiredState:
        return self.state

    def set(self, state: DesiredState) -> None:
        if state not in _STATES:
            raise ValueError(f"unknown desired state {state!r}; known: {', '.join(_STATES)}")
        self.state = state


class FileControl:
    """Reads the desired state from a file holding one word (for a local run: `echo paused >
    DIR/control`); a missing or empty file means running."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def desired_state(self) -> DesiredState:
        try:
            word = self.path.read_text().strip()
        except FileNotFoundError:
            return "running"
        if not word:
            return "running"
        if word not in _STATES:
            raise ValueError(f"{self.path}: unknown desired state {word!r}")
        return word  # type: ignore[return-value]
