"""The live stream's messages (docs/live-protocol.md): what the platform sends a run's or an
experiment's viewers over the websocket, and what a viewer may send back, as typed models.

The platform builds every message it sends with these (platform/paddock/live/: snapshots,
broadcasts, the consumers); the browser's types are generated from them
(frontend/scripts/api-types.sh → frontend/src/api/live.gen.ts), as the REST types are from
the serializers. They sit beside events.py because they carry what a job reported (metric
steps, log lines, sample sets, checkpoints) on to the viewers, with the run's cursor.

Light like events.py (the control plane imports it): pydantic only. Every message has one
shape: the fields below, in this order, none left out.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from .names import AlarmName, Backend, DesiredState, LogLevel, RunAction, RunState


class _Message(BaseModel):
    # The browser's types describe what is sent: a field with a default is still always
    # there (required in the serialization schema the TypeScript is generated from).
    model_config = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True)


class Cursor(_Message):
    """The last ingest batch a message reflects: (0, -1) before the run's first batch."""

    dispatch: int = Field(ge=0)
    seq: int = Field(ge=-1)


class RunFields(_Message):
    """A run's state and progress, as a snapshot carries them."""

    state: RunState
    desired_state: DesiredState
    step: int = Field(ge=0)
    total_steps: int = Field(ge=0)
    backend: Backend
    seed: int
    error: str = Field(description="why the run failed, else empty")
    queued_reason: str = Field(description="what a queued run waits for, else empty")


class LogRow(_Message):
    """A stored log line or status change of the run (a RunEvent)."""

    id: int = Field(description="GET /api/v1/runs/<id>/events?before=<id> scrolls back from it")
    time: float = Field(description="Unix seconds")
    level: LogLevel
    message: str
    kind: Literal["log", "status"]


class MetricStep(_Message):
    step: int = Field(ge=0)
    time: float = Field(description="Unix seconds")
    values: dict[str, float]


class StepSamples(_Message):
    """A step's samples for the inspector; items as the job reported them (SamplesEvent)."""

    step: int = Field(ge=0)
    items: list[dict[str, Any]]


class AlarmRow(_Message):
    """One alarm of the run (workers/alarms.py), as the control plane last judged it."""

    name: AlarmName
    firing: bool
    since_step: int | None = Field(description="the first step of what it saw (while firing)")
    step: int = Field(ge=0, description="the run's step it was last judged at")
    value: float | None = Field(description="the figure it judged, at that step")
    message: str = Field(description="what it saw, for people; empty while quiet")
    pause: bool = Field(description="it pauses the run when it fires")
    about: str = Field(description="what the alarm watches, in a sentence")


class _RunMessage(_Message):
    """Every message about a run names it and carries its cursor. `type` is each message's
    own literal (declared here so that it comes first on the wire)."""

    type: str
    run_id: int
    cursor: Cursor


class SnapshotMessage(_RunMessage):
    """The first message for a run on connect: its state and recent history."""

    type: Literal["snapshot"] = "snapshot"
    run: RunFields
    latest: dict[str, float] = Field(description="each key's value at its highest step")
    points: dict[str, list[tuple[int, float, float]]] = Field(
        description="each key's newest points, [step, value, time], oldest first"
    )
    logs: list[LogRow] = Field(description="the newest log and status lines, oldest first")
    samples: list[StepSamples] = Field(description="the newest sample sets, oldest step first")


class MetricsMessage(_RunMessage):
    type: Literal["metrics"] = "metrics"
    steps: list[MetricStep]


class StateMessage(_RunMessage):
    type: Literal["state"] = "state"
    state: RunState
    desired_state: DesiredState
    step: int = Field(ge=0)
    total_steps: int = Field(ge=0)
    detail: str = Field(description="the run's error, else its queue reason, else empty")


class LogMessage(LogRow, _RunMessage):
    type: Literal["log"] = "log"


class SamplesMessage(StepSamples, _RunMessage):
    type: Literal["samples"] = "samples"


class CheckpointMessage(_RunMessage):
    type: Literal["checkpoint"] = "checkpoint"
    step: int = Field(ge=0)
    uri: str
    adapter_version: int = Field(ge=0)


class AlarmsMessage(_RunMessage):
    """The run's alarms, all of them, after one began or stopped firing or was (dis)armed."""

    type: Literal["alarms"] = "alarms"
    alarms: list[AlarmRow]


class ErrorMessage(_Message):
    """A client's message refused (the error body of the REST API); the stream goes on."""

    type: Literal["error"] = "error"
    code: str
    message: str
    field: str | None = None


ServerMessage = Annotated[
    SnapshotMessage
    | MetricsMessage
    | StateMessage
    | LogMessage
    | SamplesMessage
    | CheckpointMessage
    | AlarmsMessage
    | ErrorMessage,
    Field(discriminator="type"),
]


class ControlMessage(BaseModel):
    """What a viewer sends: a control of a run; on an experiment's stream, which run.
    Other keys are ignored."""

    model_config = ConfigDict(extra="ignore")

    action: RunAction
    run_id: StrictInt | None = Field(None, description="on an experiment's stream: the run")
