"""The ingest body, validated strictly: a bad event is a 400 naming its path
(`events.3.values`), never a 500 and never a half-stored batch."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_EVENTS = 10_000
MAX_BODY_BYTES = 8 * 1024 * 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MetricEvent(_Strict):
    type: Literal["metric"]
    step: int = Field(ge=0)
    time: float
    values: dict[Annotated[str, Field(min_length=1, max_length=100)], float | None]

    @field_validator("values")
    @classmethod
    def _finite_or_null(cls, values: dict[str, float | None]) -> dict[str, float]:
        # NaN/inf cannot be stored portably: a diverged metric arrives as null and is skipped
        return {k: v for k, v in values.items() if v is not None and math.isfinite(v)}


class LogEvent(_Strict):
    type: Literal["log"]
    time: float
    level: Literal["debug", "info", "warning", "error"] = "info"
    message: str = Field(max_length=20_000)


class StatusEvent(_Strict):
    type: Literal["status"]
    state: Literal["starting", "running", "paused", "succeeded", "aborted", "failed"]
    detail: str = Field(default="", max_length=20_000)
    time: float | None = None
    total_steps: int | None = Field(default=None, ge=0)


class CheckpointEvent(_Strict):
    type: Literal["checkpoint"]
    step: int = Field(ge=0)
    uri: str = Field(min_length=1, max_length=1000)
    adapter_version: int = Field(ge=0)
    size: int | None = Field(default=None, ge=0)


class SamplesEvent(_Strict):
    type: Literal["samples"]
    step: int = Field(ge=0)
    items: list[dict[str, Any]] = Field(max_length=64)


Event = Annotated[
    MetricEvent | LogEvent | StatusEvent | CheckpointEvent | SamplesEvent,
    Field(discriminator="type"),
]


class IngestBody(_Strict):
    dispatch: int = Field(ge=1)
    seq: int = Field(ge=0)
    events: list[Event] = Field(max_length=MAX_EVENTS)
