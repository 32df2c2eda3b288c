"""Everything the run reports goes through one emitter: DIR/metrics.jsonl, the progress bar,
and the callbacks through which the HTTP reporter receives the ingest events
(metric, log, status, checkpoint, samples: the models of workers/events.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..events import (
    MAX_SAMPLE_ITEMS,
    CheckpointEvent,
    Event,
    LogEvent,
    MetricEvent,
    SamplesEvent,
    StatusEvent,
)
from ..names import LogLevel, ReportedState

MetricsHook = Callable[[int, dict[str, float]], None]
EventHook = Callable[[Event], None]


def _line(message: str, level: LogLevel) -> str:
    return f"[{level}] {message}"


def early_log(on_event: EventHook | None, progress: bool) -> Callable[[str], None]:
    """Info lines as the emitter sends them, for what a run does before its emitter exists
    (building the tiny model: minutes on a fresh PADDOCK_HOME, before the first step)."""

    def log(message: str) -> None:
        if on_event is not None:
            on_event(LogEvent.now(message))
        if progress:
            print(_line(message, "info"), file=sys.stderr, flush=True)

    return log


class Emitter:
    def __init__(
        self,
        out_dir: Path,
        total_steps: int,
        start_step: int = 0,
        on_metrics: MetricsHook | None = None,
        on_event: EventHook | None = None,
        progress: bool = True,
    ):
        self.metrics_path = out_dir / "metrics.jsonl"
        self._file = self.metrics_path.open("a", encoding="utf-8")
        self.on_metrics, self.on_event = on_metrics, on_event
        self.total_steps = total_steps
        self.last: dict[str, float] = {}
        self.not_finite: dict[str, int] = {}  # values the event dropped, by key
        self._bar = (
            tqdm(
                total=total_steps,
                initial=start_step,
                desc="train",
                unit="step",
                file=sys.stderr,
                dynamic_ncols=True,
                # a log file (no TTY) gets a line every few seconds, not one per step
                mininterval=0.2 if sys.stderr.isatty() else 5.0,
            )
            if progress
            else None
        )

    def _event(self, event: Event) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def metric(self, step: int, values: dict[str, float], advance: bool = True) -> None:
        event = MetricEvent.now(step, values)
        clean = event.values  # finite only (workers/events.py): the file, the bar, the hooks
        self._file.write(json.dumps({"step": step, "time": event.time, **clean}) + "\n")
        self._file.flush()
        self.last.update(clean)
        if self.on_metrics is not None:
            self.on_metrics(step, clean)
        self._event(event)
        self._warn_not_finite(step, [k for k in values if k not in clean])
        if self._bar is not None:
            post = {
                "reward": clean.get("reward/mean"),
                "acc": clean.get("accuracy"),
                "eval": self.last.get("eval/accuracy"),
            }
            self._bar.set_postfix({k: f"{v:.3f}" for k, v in post.items() if v is not None})
            if advance:
                self._bar.update(1)

    def _warn_not_finite(self, step: int, keys: list[str]) -> None:
        """Once per key: a diverged metric says so in the run's log rather than vanishing
        from its charts unexplained; `not_finite` keeps the count."""
        first = [k for k in keys if k not in self.not_finite]
        for k in keys:
            self.not_finite[k] = self.not_finite.get(k, 0) + 1
        if first:
            self.log(
                f"step {step}: {', '.join(first)} not finite (NaN or inf), left out of the "
                "metrics; said once per key",
                level="warning",
            )

    def log(self, message: str, level: LogLevel = "info") -> None:
        self._event(LogEvent.now(message, level))
        if self._bar is not None and level != "debug":
            self._bar.write(_line(message, level), file=sys.stderr)

    def status(self, state: ReportedState, detail: str = "") -> None:
        # total_steps lets a viewer draw progress and an ETA from the metric steps.
        self._event(StatusEvent.now(state, detail, self.total_steps))

    def checkpoint(self, step: int, uri: str, adapter_version: int, size: int | None) -> None:
        self._event(CheckpointEvent(step=step, uri=uri, adapter_version=adapter_version, size=size))

    def samples(self, step: int, items: list[dict[str, Any]]) -> None:
        if items:  # train.log_samples may ask for more than one event holds
            self._event(SamplesEvent(step=step, items=items[:MAX_SAMPLE_ITEMS]))

    def close(self) -> None:
        self._file.close()
        if self._bar is not None:
            self._bar.close()
