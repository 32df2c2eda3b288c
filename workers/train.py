"""`train()`: run a spec in this process (no Ray), the function behind `paddock train`."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from .grants import Grants
from .loop import Outcome, run_training
from .loop.control import ControlSource
from .loop.events import EventHook, MetricsHook
from .spec import RunSpec, apply_overrides, load_spec, parse_spec


def resolve_spec(
    spec: RunSpec | dict[str, Any] | str | Path, overrides: list[str] | None
) -> RunSpec:
    if isinstance(spec, RunSpec):
        return parse_spec(apply_overrides(spec.to_dict(), overrides or []))
    if isinstance(spec, dict):
        return parse_spec(apply_overrides(spec, overrides or []))
    return load_spec(spec, overrides)


def default_out_dir() -> Path:
    return Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def train(
    spec: RunSpec | dict[str, Any] | str | Path,
    out_dir: str | Path | None = None,
    overrides: list[str] | None = None,
    control: ControlSource | None = None,
    on_metrics: MetricsHook | None = None,
    progress: bool = True,
    on_event: EventHook | None = None,
    grants: Grants | None = None,
) -> Outcome:
    """Train `spec` (a RunSpec, a dict, a YAML/JSON path or text) with `key.path=value`
    overrides. Writes OUT/spec.yaml, OUT/metrics.jsonl and OUT/checkpoints/step-N/.

    `control.desired_state()` (running | paused | aborted) is read between steps;
    `on_metrics(step, values)` gets every metric row; `on_event(event)` gets the ingest events
    (metric, log, status, checkpoint, samples: models of workers/events.py). Returns the
    Outcome (state succeeded | paused | aborted, step, adapter_version, last checkpoint).
    `grants`: the run's secrets and egress policy (workers/grants.py), which a job under the
    platform receives at bootstrap; default: `paddock train`'s, from the environment."""
    resolved = resolve_spec(spec, overrides)
    out = Path(out_dir) if out_dir is not None else default_out_dir()
    runner = run_training
    if resolved.resources.executor == "ray":  # the same loop, with actors: Ray only if asked
        from .distributed.run import run_on_ray as runner
    return asyncio.run(
        runner(
            resolved,
            out,
            control=control,
            on_metrics=on_metrics,
            on_event=on_event,
            progress=progress,
            grants=grants if grants is not None else Grants.standalone(),
        )
    )
