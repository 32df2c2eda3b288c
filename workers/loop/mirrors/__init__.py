"""Mirrors of a run's metrics in the tools a team already uses (the spec's `logging:`).

Each sink is one small module behind `Sink`; `Mirrors` feeds them from the Emitter's metrics
hook. The sinks work on one thread of their own, fed by a bounded queue: a slow or
unreachable tracking server never holds up a training step. A failure of a sink never ends
the run: it is collected on that thread and reported by the run's own thread as a `warning`
log event (the next time a metric comes, and at the end); after `MAX_FAILURES` failures in a
row the sink is turned off, which the warning says. A sink's library (tensorboard, mlflow,
wandb) is imported by its sink when it opens, never by a run without it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ...egress import EgressPolicy
from ...names import TERMINAL_RUN_STATES
from ...spec import LoggingSpec
from .mlflow_sink import MlflowSink
from .tensorboard_sink import TensorboardSink
from .wandb_sink import WandbSink

log = logging.getLogger(__name__)

MAX_FAILURES = 5  # in a row, then the sink is turned off
QUEUE_POINTS = 10_000  # metric rows waiting for the sinks; past it, rows are dropped (counted)
CLOSE_TIMEOUT_S = 30.0  # at the end, how long the sinks may take to send what is queued

Warn = Callable[[str], None]
MetricsHook = Callable[[int, dict[str, float]], None]
EventHook = Callable[[Any], None]


def _field(event: Any, name: str) -> Any:
    # an event as a dict or as one of workers/events.py's models
    return event.get(name) if isinstance(event, dict) else getattr(event, name, None)


class Sink(Protocol):
    """One destination. Called on the mirrors' thread only, in this order: `open` once,
    `log` per metric row (values finite, as the Emitter reports them), `close` once."""

    name: str

    def open(self) -> None: ...

    def log(self, step: int, wall_time: float, values: dict[str, float]) -> None: ...

    def close(self) -> None: ...


def sinks_for(spec: LoggingSpec, out_dir: Path, config: dict, egress: EgressPolicy) -> list[Sink]:
    """The sinks a `logging:` section asks for (each imports its library when it opens).
    `config` is the run's spec as a dict, for the sinks that record it; `egress` the policy
    a tracking server's address is checked against."""
    sinks: list[Sink] = []
    run_name = out_dir.name
    if spec.tensorboard is not None:
        sinks.append(TensorboardSink(out_dir / spec.tensorboard.dir))
    if spec.mlflow is not None:
        sinks.append(MlflowSink(spec.mlflow, spec.mlflow.run_name or run_name, config, egress))
    if spec.wandb is not None:
        sinks.append(WandbSink(spec.wandb, spec.wandb.run_name or run_name, out_dir, config))
    return sinks


class Mirrors:
    """Fans the Emitter's metric rows out to the sinks on one background thread."""

    def __init__(self, sinks: list[Sink]):
        self.sinks = sinks
        self.warn: Warn = lambda message: log.warning("%s", message)  # the Emitter's, once built
        self._queue: queue.Queue[tuple[int, float, dict[str, float]] | None] = queue.Queue(
            QUEUE_POINTS
        )
        self._warnings: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._dropped = 0
        self._failures: dict[str, int] = {}  # by sink name: failures in a row
        self._thread: threading.Thread | None = None
        if sinks:
            self._thread = threading.Thread(target=self._work, name="metric-mirrors", daemon=True)
            self._thread.start()

    def hooks(self, on_metrics: MetricsHook | None, on_event: EventHook | None):
        """The Emitter's (metrics hook, event hook): `on_metrics` and `on_event` (if any),
        with each metric row mirrored, and the mirrors closed before the run's final status
        goes out (the platform takes no event after it, not even a mirror's warning)."""
        if not self.sinks:
            return on_metrics, on_event

        def metrics_hook(step: int, values: dict[str, float]) -> None:
            if on_metrics is not None:
                on_metrics(step, values)
            self.metric(step, values)

        def event_hook(event) -> None:
            # only a terminal state closes the sinks: a paused run may resume in this process
            if _field(event, "type") == "status" and _field(event, "state") in TERMINAL_RUN_STATES:
                self.close()
            if on_event is not None:
                on_event(event)

        return metrics_hook, event_hook

    def metric(self, step: int, values: dict[str, float]) -> None:
        self._report()
        if not values or self._thread is None:  # nothing to mirror to, or closed
            return
        try:
            self._queue.put_nowait((step, time.time(), dict(values)))
        except queue.Full:
            if self._dropped == 0:
                self._warnings.put(
                    f"metric mirrors: {QUEUE_POINTS} rows waiting for the sinks; dropping "
                    "rows until they catch up"
                )
            self._dropped += 1

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Send what is queued (for at most `timeout_s`), close the sinks, report warnings.
        Again: nothing more to do."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self._warnings.put(
                    f"metric mirrors: the sinks did not finish within {timeout_s:.0f} s; "
                    f"{self._queue.qsize()} rows were not sent"
                )
            self._thread = None
        if self._dropped:
            self._warnings.put(f"metric mirrors: {self._dropped} rows dropped (queue full)")
        self._report()

    def _report(self) -> None:
        # on the run's thread: the Emitter and the reporter are not called from the worker
        while True:
            try:
                message = self._warnings.get_nowait()
            except queue.Empty:
                return
            self.warn(message)

    def _work(self) -> None:
        live = [sink for sink in self.sinks if self._call(sink, "open", 1, sink.open)]
        while (item := self._queue.get()) is not None:
            for sink in list(live):
                if not self._call(sink, "log", MAX_FAILURES, sink.log, *item):
                    live.remove(sink)
        for sink in live:
            self._call(sink, "close", 1, sink.close)

    def _call(self, sink: Sink, what: str, limit: int, fn: Callable, *args) -> bool:
        """`fn(*args)`; False once the sink is to be turned off (`limit` failures in a row)."""
        try:
            fn(*args)
        except Exception as exc:  # a sink never ends the run
            n = self._failures[sink.name] = self._failures.get(sink.name, 0) + 1
            off = n >= limit
            if n == 1 or off:
                tail = "; retrying with the next rows"
                if off:
                    tail = f"; turned off after {n} failures in a row" if limit > 1 else "; off"
                error = f"{type(exc).__name__}: {exc}"[:2000]
                self._warnings.put(f"metric mirror {sink.name}: {what} failed: {error}{tail}")
            return not off
        self._failures[sink.name] = 0
        return True


def open_mirrors(
    spec: LoggingSpec, out_dir: Path, config: dict, egress: EgressPolicy | None = None
) -> Mirrors:
    """The mirrors of a run (none: a `Mirrors` that does nothing and starts no thread);
    `egress`: the run's policy (default: from the environment, as `paddock train`'s)."""
    policy = egress if egress is not None else EgressPolicy.from_env()
    return Mirrors(sinks_for(spec, out_dir, config, policy))
