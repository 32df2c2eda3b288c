"""The reporter: a job's events travel to the platform's ingest endpoint (docs/ingest-protocol.md).

Promises, and how they are kept:
- **Never blocks training.** `emit` only appends to an in-memory queue; a background thread
  does all I/O.
- **Nothing acknowledged is lost, nothing is stored twice.** Every batch is written to the
  spool directory *before* it is sent, with its `(dispatch, seq)`, and deleted only after the
  platform acknowledged that seq. A platform that is down, restarting or slow makes batches
  pile up on disk; they are replayed strictly in seq order once it answers. The server
  acknowledges a pair it already stored without storing it again, so a resend after a lost
  reply is harmless.
- **Control within about a second.** The thread sends at least once per `interval_s` (an
  empty heartbeat when there is nothing to say); each reply carries the run's
  `desired_state`, handed to `on_desired_state`.

`seq` survives a restart of the job's process: the next seq is kept in the spool directory,
so a restarted reporter of the same dispatch never reuses a seq that the server would take
for a duplicate.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from pydantic import ValidationError

from .events import (
    CheckpointEvent,
    Event,
    IngestBody,
    IngestReply,
    LogEvent,
    MetricEvent,
    SamplesEvent,
    StatusEvent,
)
from .names import LogLevel, ReportedState

log = logging.getLogger(__name__)


class ReporterRejected(RuntimeError):
    """The platform refused the batch for good (bad token, finished run, invalid event)."""


@dataclass(frozen=True)
class ReporterConfig:
    url: str  # the platform's public URL, e.g. http://127.0.0.1:8000
    run_id: int | str
    token: str
    dispatch: int
    spool_dir: Path
    interval_s: float = 1.0  # a batch (or a heartbeat) at least this often
    max_events: int = 2000  # a batch is sent early once it holds this many events
    timeout_s: float = 10.0
    max_backoff_s: float = 10.0


class Reporter:
    def __init__(
        self,
        config: ReporterConfig,
        on_desired_state: Callable[[str], None] | None = None,
        session: requests.Session | None = None,
    ):
        self.config = config
        self.on_desired_state = on_desired_state
        self.desired_state: str | None = None
        self.last_ack = 0
        self.rejected: ReporterRejected | None = None
        self._queue: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._session = session or requests.Session()
        self._session.headers["Authorization"] = f"Bearer {config.token}"
        self._endpoint = f"{config.url.rstrip('/')}/api/v1/runs/{config.run_id}/ingest"
        self._spool = Path(config.spool_dir) / f"dispatch-{config.dispatch}"
        self._spool.mkdir(parents=True, exist_ok=True)
        self._next_seq = self._load_next_seq()
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._pending = 0  # events emitted but not yet acknowledged
        self._thread = threading.Thread(target=self._run, name="paddock-reporter", daemon=True)
        self._thread.start()

    # ---- the API the training loop calls: cheap, never blocking --------------------------

    def emit(self, event: Event) -> None:
        with self._idle:
            self._pending += 1
        self._queue.put(event)

    # Shorthands for a job that reports without the training loop's emitter (workers/job.py,
    # a client of your own): the events are built, and checked, here on the caller's thread.
    def metric(self, step: int, values: dict[str, float], at: float | None = None) -> None:
        self.emit(MetricEvent.now(step, values, at))

    def log(self, message: str, level: LogLevel = "info") -> None:
        self.emit(LogEvent.now(message, level))

    def status(self, state: ReportedState, detail: str = "") -> None:
        self.emit(StatusEvent.now(state, detail))

    def checkpoint(
        self, step: int, uri: str, adapter_version: int, size: int | None = None
    ) -> None:
        """`size`: the checkpoint's bytes, shown beside it; None (unknown) is not 0 bytes."""
        self.emit(CheckpointEvent(step=step, uri=uri, adapter_version=adapter_version, size=size))

    def samples(self, step: int, items: list[dict[str, Any]]) -> None:
        self.emit(SamplesEvent(step=step, items=items))

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything emitted so far is acknowledged; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._pending and self.rejected is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, 0.2))
        return self.rejected is None

    def close(self, timeout_s: float = 30.0) -> bool:
        """Flush, then stop the thread. What could not be sent stays in the spool for the
        next reporter of this dispatch to replay."""
        done = self.flush(timeout_s)
        self._stop.set()
        self._thread.join(timeout=self.config.timeout_s + 1)
        return done

    # ---- the background thread -----------------------------------------------------------

    def _run(self) -> None:
        backoff = 0.0
        next_beat = time.monotonic()
        while not self._stop.is_set():
            self._spool_queued(wait_s=min(self.config.interval_s, max(backoff, 0.05)))
            if self.rejected is not None:
                continue
            try:
                sent = self._send_spooled()
                if not sent and time.monotonic() >= next_beat:
                    beat = IngestBody(dispatch=self.config.dispatch, seq=self.last_ack, events=[])
                    self._post(beat.model_dump_json(), beat.seq, events=0)
                    sent = True
                if sent:
                    next_beat = time.monotonic() + self.config.interval_s
                backoff = 0.0
            except ReporterRejected as exc:
                log.error("the platform refused this job's events: %s", exc)
                self.rejected = exc
                with self._idle:
                    self._idle.notify_all()
            except (requests.RequestException, _Retry) as exc:
                backoff = min(max(backoff * 2, 0.25), self.config.max_backoff_s)
                log.warning("platform unreachable (%s); retrying in %.2f s", exc, backoff)
                self._stop.wait(backoff)

    def _spool_queued(self, wait_s: float) -> None:
        """Move queued events into one spool file per batch (at most max_events each)."""
        events: list[Event] = []
        deadline = time.monotonic() + wait_s
        while len(events) < self.config.max_events:
            try:
                left = deadline - time.monotonic()
                events.append(
                    self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
                )
            except queue.Empty:
                break
        if not events:
            return
        seq = self._next_seq
        body = IngestBody(dispatch=self.config.dispatch, seq=seq, events=events)
        # Both writes are atomic: a kill -9 leaves a batch whole or absent, and the marker at
        # its old or its new value (a torn, empty marker would make the next start unable to
        # tell which sequence numbers the platform has already stored).
        _write_atomic(self._spool / f"{seq:010d}.json", body.model_dump_json())
        self._next_seq = seq + 1
        _write_atomic(self._spool / "next_seq", str(self._next_seq))

    def _send_spooled(self) -> bool:
        """Send spooled batches oldest first; stop at the first failure (order matters)."""
        sent = False
        for path in sorted(self._spool.glob("*.json")):
            text = path.read_text()
            events = len(json.loads(text)["events"])
            self._post(text, int(path.stem), events)
            path.unlink()
            with self._idle:
                self._pending = max(0, self._pending - events)
                self._idle.notify_all()
            sent = True
        return sent

    def _post(self, body: str, seq: int, events: int) -> None:
        """POST one batch, already JSON (as spooled); `events` is how many it holds."""
        reply = self._session.post(
            self._endpoint, data=body.encode(), headers=_JSON, timeout=self.config.timeout_s
        )
        if reply.status_code >= 500 or reply.status_code == 429:
            raise _Retry(f"HTTP {reply.status_code}")
        if reply.status_code >= 400:
            raise ReporterRejected(f"HTTP {reply.status_code}: {reply.text[:500]}")
        try:
            answer = IngestReply.model_validate_json(reply.content)
        except ValidationError as exc:  # a 200 that is not the platform's (a proxy's page)
            raise _Retry(f"not an ingest reply: {reply.text[:200]}") from exc
        if events:
            if answer.ack != seq:
                raise _Retry(f"acknowledged {answer.ack} for seq {seq}")
            self.last_ack = seq
        desired = answer.desired_state
        if desired != self.desired_state:
            self.desired_state = desired
            if self.on_desired_state is not None:
                self.on_desired_state(desired)

    def _load_next_seq(self) -> int:
        marker = self._spool / "next_seq"
        spooled = [int(p.stem) for p in self._spool.glob("*.json")]
        stored = int(marker.read_text()) if marker.exists() else 1
        return max([stored, *(s + 1 for s in spooled)])


_JSON = {"Content-Type": "application/json"}


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class _Retry(Exception):
    """A transient failure: keep the batch and try again after a backoff."""
