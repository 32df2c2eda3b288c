"""An experiment's pre-flight check (docs/preflight.md), as GET /experiments/{id}/preflight
answers: its state and each pre-flight run's verdict, the job's own `PreflightEvent`
(workers/events.py), the one definition of its shape."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from workers.events import PreflightEvent
from workers.names import RunState


class PreflightRun(BaseModel):
    run_id: int
    backend: str
    state: RunState
    verdict: PreflightEvent | None


class ExperimentPreflight(BaseModel):
    experiment_id: int
    state: Literal["", "pending", "passed", "failed", "overridden"]
    runs: list[PreflightRun]
