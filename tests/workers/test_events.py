"""The ingest contract of workers/events.py: one finite-value policy, text cut at the source,
and what the emitter and the reporter put on the wire is what the platform's model takes."""

from __future__ import annotations

import json
import math
import socket

import pytest
from pydantic import ValidationError

from workers.events import (
    MAX_TEXT,
    IngestBody,
    IngestReply,
    LogEvent,
    MetricEvent,
    StatusEvent,
)
from workers.loop.events import Emitter
from workers.report import Reporter, ReporterConfig


def _strict_json(text: str):
    """json.loads that refuses NaN and Infinity, as the platform's reader does."""

    def refuse(name: str):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_null_and_non_finite_metric_values_are_dropped_the_rest_kept():
    event = MetricEvent.now(3, {"loss": math.nan, "kl": math.inf, "gone": None, "reward": 0.5})
    assert event.values == {"reward": 0.5}
    # the same policy where the platform validates a batch
    body = IngestBody.model_validate(
        {"dispatch": 1, "seq": 1, "events": [
            {"type": "metric", "step": 1, "time": 0.0, "values": {"a": None, "b": -1e308}}]}
    )  # fmt: skip
    assert body.events[0].values == {"b": -1e308}
    # finite values whose sum overflows are all kept (the check's fast path sums them)
    assert MetricEvent.now(1, {"a": 1e308, "b": 1e308}).values == {"a": 1e308, "b": 1e308}


def test_a_bad_event_is_refused_naming_its_path_and_type():
    bad = {"dispatch": 1, "seq": 1, "events": [
        {"type": "log", "time": 0.0, "message": "ok"},
        {"type": "metric", "step": -1, "time": 0.0, "values": {}},
        {"type": "status", "state": "queued"}]}  # fmt: skip
    with pytest.raises(ValidationError) as caught:
        IngestBody.model_validate(bad)
    paths = {".".join(map(str, e["loc"])) for e in caught.value.errors()}
    assert paths == {"events.1.metric.step", "events.2.status.state"}


def test_long_text_is_cut_at_the_source_keeping_head_and_tail():
    detail = "RuntimeError: boom\n" + "x" * (3 * MAX_TEXT) + "\nthe last frame"
    event = StatusEvent.now("failed", detail)
    assert MAX_TEXT - 2 <= len(event.detail) <= MAX_TEXT
    assert event.detail.startswith("RuntimeError: boom") and event.detail.endswith("last frame")
    assert "…" in event.detail
    assert LogEvent.now("short").message == "short"
    # the platform still refuses what is too long: the cut is the job's, not the server's
    with pytest.raises(ValidationError):
        LogEvent(time=0.0, message="y" * (MAX_TEXT + 1))


def test_the_reply_ignores_fields_a_newer_platform_adds():
    reply = IngestReply.model_validate({"ack": 4, "desired_state": "paused", "later": 1})
    assert (reply.ack, reply.desired_state) == (4, "paused")
    with pytest.raises(ValidationError):
        IngestReply.model_validate({"ack": 4, "desired_state": "sleeping"})


def test_the_emitter_warns_once_per_key_and_counts(tmp_path):
    events = []
    emitter = Emitter(tmp_path, total_steps=3, on_event=events.append, progress=False)
    for step in (1, 2, 3):
        emitter.metric(step, {"loss": math.nan, "kl": 0.1 * step})
    emitter.metric(4, {"loss": 1.0, "kl": math.inf})
    emitter.close()
    warnings = [e.message for e in events if isinstance(e, LogEvent)]
    assert len(warnings) == 2
    assert warnings[0].startswith("step 1: loss not finite") and "step 4: kl" in warnings[1]
    assert emitter.not_finite == {"loss": 3, "kl": 1}
    rows = [_strict_json(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [sorted(r) for r in rows] == [["kl", "step", "time"]] * 3 + [["loss", "step", "time"]]
    metrics = [e for e in events if isinstance(e, MetricEvent)]
    assert [e.values for e in metrics][-1] == {"loss": 1.0}


def _dead_url() -> str:
    with socket.socket() as sock:  # bound, then closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_the_reporter_spools_strict_json_that_the_platform_model_takes(tmp_path):
    """With the platform down, batches pile up in the spool; each is exactly the body that
    will be sent. A NaN inside a sample item (free-form) goes out as null, so one diverged
    reward never gets the whole batch refused as invalid JSON."""
    config = ReporterConfig(url=_dead_url(), run_id=1, token="t", dispatch=2,
                            spool_dir=tmp_path, interval_s=0.01, max_backoff_s=0.01)  # fmt: skip
    reporter = Reporter(config)
    reporter.status("running", "started")
    reporter.metric(1, {"reward/mean": 0.5, "loss": math.nan})
    reporter.samples(1, [{"prompt": "1+1=", "completion": "2", "reward": math.nan}])
    reporter.checkpoint(1, "file:///store/runs/1/ck/1", adapter_version=1, size=10)
    reporter.log("done", level="warning")
    assert not reporter.flush(timeout_s=0.5)  # nothing can be acknowledged
    reporter.close(timeout_s=0.1)
    texts = [p.read_text() for p in sorted((tmp_path / "dispatch-2").glob("*.json"))]
    events = []
    for text in texts:
        raw = _strict_json(text)
        body = IngestBody.model_validate(raw)
        assert body.dispatch == 2 and body.seq >= 1
        events.extend(raw["events"])
    assert [e["type"] for e in events] == ["status", "metric", "samples", "checkpoint", "log"]
    assert events[1]["values"] == {"reward/mean": 0.5}
    assert events[2]["items"][0]["reward"] is None
