"""Everything the run reports goes through one emitter: DIR/metrics.jsonl, the progress bar,
and the callbacks through which the HTTP reporter receives the ingest events
(metric, log, status, checkpoint, samples)."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

MetricsHook = Callable[[int, dict[str, float]], None]
EventHook = Callable[[dict[str, Any]], None]


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

    def _event(self, event: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def metric(self, step: int, values: dict[str, float], advance: bool = True) -> None:
        # NaN/inf are not JSON: leave such a metric out rather than write an invalid line.
        clean = {k: float(v) for k, v in values.items() if math.isfinite(float(v))}
        now = time.time()
        self._file.write(json.dumps({"step": step, "time": now, **clean}) + "\n")
        self._file.flush()
        self.last.update(clean)
        if self.on_metrics is not None:
            self.on_metrics(step, clean)
        self._event({"type": "metric", "step": step, "time": now, "values": clean})
        if self._bar is not None:
            post = {
                "reward": clean.get("reward/mean"),
                "acc": clean.get("accuracy"),
                "eval": self.last.get("eval/accuracy"),
            }
            self._bar.set_postfix({k: f"{v:.3f}" for k, v in post.items() if v is not None})
            if advance:
                self._bar.update(1)

    def log(self, message: str, level: str = "info") -> None:
        self._event({"type": "log", "time": time.time(), "level": level, "message": message})
        if self._bar is not None and level != "debug":
            self._bar.write(f"[{level}] {message}", file=sys.stderr)

    def status(self, state: str, detail: str = "") -> None:
        # total_steps lets a viewer draw progress and an ETA from the metric steps.
        self._event({"type": "status", "state": state, "detail": detail, "time": time.time(),
                     "total_steps": self.total_steps})  # fmt: skip

    def checkpoint(self, step: int, uri: str, adapter_version: int) -> None:
        self._event(
            {"type": "checkpoint", "step": step, "uri": uri, "adapter_version": adapter_version}
        )

    def samples(self, step: int, items: list[dict[str, Any]]) -> None:
        if items:
            self._event({"type": "samples", "step": step, "items": items})

    def close(self) -> None:
        self._file.close()
        if self._bar is not None:
            self._bar.close()
