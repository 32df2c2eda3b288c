"""The ingest contract (docs/ingest-protocol.md): every event a job reports, the batch that
carries them and the platform's reply, as typed models that both halves use. A job builds
its events with these (the emitter, the reporter, the Ray runner); the platform validates
each batch with the same `IngestBody`, so what one side sends is what the other takes.

Light like spec.py (the control plane imports it): pydantic only, never torch or an engine.

One finite-value policy, in `MetricEvent`: a metric value that is null or not finite (NaN,
±inf: a diverged loss) is dropped from the event, the rest kept. JSON has no NaN, the
platform stores finite numbers only, and a batch refused for one NaN would stop a job's
reporting for good. The emitter warns once per key when it drops one
(`workers/loop/events.py`). Everything else is refused, naming the field: a bad event is a
400 naming its path (`events.3.metric.step`), never a 500 and never a half-stored batch.
"""

from __future__ import annotations

import math
import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .names import (
    PREFLIGHT_CHECKS,
    Backend,
    DesiredState,
    LogLevel,
    PreflightCheckName,
    PreflightStatus,
    ReportedState,
)

MAX_EVENTS = 10_000  # per batch
MAX_BODY_BYTES = 8 * 1024 * 1024  # per request, checked by the server before parsing
MAX_TEXT = 20_000  # characters of a log message or a status detail
MAX_SAMPLE_ITEMS = 64  # per samples event

MetricKey = Annotated[str, Field(min_length=1, max_length=100)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _clip(text: str) -> str:
    """A job's text cut to MAX_TEXT, its middle left out (a traceback's head names the error,
    its tail where it happened): cut at the source, not refused with the whole batch."""
    if len(text) <= MAX_TEXT:
        return text
    half = (MAX_TEXT - 1) // 2
    return f"{text[:half]}…{text[-half:]}"


class MetricEvent(_Strict):
    type: Literal["metric"] = "metric"
    step: int = Field(ge=0)
    time: float
    values: dict[MetricKey, float | None]

    @field_validator("values")
    @classmethod
    def _finite_only(cls, values: dict[str, float | None]) -> dict[str, float]:
        # The finite-value policy (see the module's docstring). The common case is checked in
        # C, without a Python loop over the values: a sum is finite only if every term is
        # (NaN and ±inf propagate; a sum that overflows merely takes the slow path).
        numbers = values.values()
        if None not in numbers and math.isfinite(sum(numbers)):  # type: ignore[arg-type]
            return values  # type: ignore[return-value]
        return {k: v for k, v in values.items() if v is not None and math.isfinite(v)}

    @classmethod
    def now(cls, step: int, values: dict[str, float], at: float | None = None) -> MetricEvent:
        return cls(step=step, time=time.time() if at is None else at, values=values)


class LogEvent(_Strict):
    type: Literal["log"] = "log"
    time: float
    level: LogLevel = "info"
    message: str = Field(max_length=MAX_TEXT)

    @classmethod
    def now(cls, message: str, level: LogLevel = "info") -> LogEvent:
        return cls(time=time.time(), level=level, message=_clip(message))


class StatusEvent(_Strict):
    type: Literal["status"] = "status"
    state: ReportedState
    detail: str = Field(default="", max_length=MAX_TEXT)
    time: float | None = None
    total_steps: int | None = Field(default=None, ge=0)

    @classmethod
    def now(
        cls, state: ReportedState, detail: str = "", total_steps: int | None = None
    ) -> StatusEvent:
        return cls(state=state, detail=_clip(detail), time=time.time(), total_steps=total_steps)


class CheckpointEvent(_Strict):
    type: Literal["checkpoint"] = "checkpoint"
    step: int = Field(ge=0)
    uri: str = Field(min_length=1, max_length=1000)
    adapter_version: int = Field(ge=0)
    size: int | None = Field(default=None, ge=0)


class SamplesEvent(_Strict):
    """A few of a step's samples for the inspector. The browser reads `prompt`,
    `completion`, `answer`, `reward`, `advantage`, `adapter_version`, `terms`, `details` and
    an episode's `turns` (envs/metrics.py) of each item; the items stay free-form objects,
    since a prompt may be a string or chat messages and an answer whatever the dataset's
    column holds."""

    type: Literal["samples"] = "samples"
    step: int = Field(ge=0)
    items: list[dict[str, Any]] = Field(max_length=MAX_SAMPLE_ITEMS)


class PreflightCheck(_Strict):
    """One check of the pre-flight verdict (workers/preflight.py): what it judged, its
    figure, and why it failed or was skipped."""

    name: PreflightCheckName
    status: PreflightStatus
    figure: str = Field(max_length=1000, description="the numbers it judged, for people")
    value: float | None = Field(default=None, description="the figure it judged by, if one")
    message: str = Field(default="", max_length=MAX_TEXT, description="why not passed")


class PreflightEvent(_Strict):
    """The pre-flight verdict of a run's spec on its engine: every check, in
    PREFLIGHT_CHECKS order. Passed when none failed."""

    type: Literal["preflight"] = "preflight"
    time: float
    backend: Backend
    steps: int = Field(ge=0, description="steps of each phase it ran")
    checks: list[PreflightCheck] = Field(max_length=len(PREFLIGHT_CHECKS))

    @property
    def passed(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    @field_validator("checks")
    @classmethod
    def _each_once(cls, checks: list[PreflightCheck]) -> list[PreflightCheck]:
        if [c.name for c in checks] != [
            n for n in PREFLIGHT_CHECKS if n in {c.name for c in checks}
        ]:
            raise ValueError("each check at most once, in PREFLIGHT_CHECKS order")
        return checks


# For annotations: any one event. For validation: the union tagged by `type`, so an error
# names the event's type in its path (events.3.metric.values.loss).
Event = MetricEvent | LogEvent | StatusEvent | CheckpointEvent | SamplesEvent | PreflightEvent
TaggedEvent = Annotated[Event, Field(discriminator="type")]


class IngestBody(_Strict):
    """`POST /api/v1/runs/{id}/ingest`: one batch; no events is a heartbeat."""

    dispatch: int = Field(ge=1)
    seq: int = Field(ge=0)
    events: list[TaggedEvent] = Field(max_length=MAX_EVENTS)


class IngestReply(BaseModel):
    """The platform's answer to a stored (or recognised) batch. Fields a newer platform adds
    are ignored, so an older job keeps working against it."""

    model_config = ConfigDict(extra="ignore")

    ack: int = Field(ge=0)
    desired_state: DesiredState
