"""What checking an ingest batch costs, beside what reading it costs, in one run.

    .venv/bin/python bench/ingest_validate.py            # --events 2000 --keys 25 --repeat 30

A batch like the reporter's largest (2,000 events: metrics of 25 keys each, a log line every
tenth event, a status and a samples event) is measured, medians of `--repeat` rounds:
  - the server's strict JSON reader (core/jsonbody.py) on the body's bytes,
  - `IngestBody.model_validate` (workers/events.py) on the parsed body: what the platform
    runs for every batch,
  - a hand-written check of the same rules for the metric events only (type, step, time,
    key lengths, finite numbers): a floor for any validator written in Python,
  - the job's side: building the events (`MetricEvent.now`, `LogEvent.now`) and the body's
    JSON (`IngestBody(...).model_dump_json()`, what the reporter spools and sends).
No database and no network: the figures are CPU per batch, printed per event and as ratios.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "platform"), str(REPO)]

from paddock.core.jsonbody import json_parse  # noqa: E402
from workers.events import IngestBody, LogEvent, MetricEvent, SamplesEvent, StatusEvent  # noqa: E402


def medians_s(fns: dict, repeat: int) -> dict[str, float]:
    """Median seconds of each function, the functions taking turns in every round, so a
    shared machine's load drifts over all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def _events(n: int, keys: int) -> list:
    names = [f"metric/{i:02d}" for i in range(keys)]
    out: list = [StatusEvent.now("running", "started", total_steps=n)]
    for step in range(n - 2):
        if step % 10 == 9:
            out.append(LogEvent.now(f"step {step} done"))
        else:
            out.append(MetricEvent.now(step, {k: step * 0.001 + i for i, k in enumerate(names)}))
    items = [{"prompt": "12+7=", "completion": "19", "reward": 1.0, "advantage": 0.5}] * 4
    out.append(SamplesEvent(step=n, items=items))
    return out


def _hand_checked(body: dict) -> None:
    """The metric rules written out by hand, the rest skipped (a floor, not a validator)."""
    for event in body["events"]:
        if event["type"] != "metric":
            continue
        step, when, values = event["step"], event["time"], event["values"]
        if not isinstance(step, int) or step < 0 or not isinstance(when, int | float):
            raise ValueError("step or time")
        for key, value in values.items():
            if not 1 <= len(key) <= 100 or not isinstance(value, int | float):
                raise ValueError(key)
            if not math.isfinite(value):
                raise ValueError(key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=25)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    events = _events(args.events, args.keys)
    text = IngestBody(dispatch=1, seq=1, events=events).model_dump_json().encode()
    parsed = json_parse(text)
    batch = IngestBody(dispatch=1, seq=1, events=events)
    rows = medians_s(
        {
            "strict JSON read (server)": lambda: json_parse(text),
            "IngestBody.model_validate (server)": lambda: IngestBody.model_validate(parsed),
            "hand-written metric checks (floor)": lambda: _hand_checked(parsed),
            "events built (job)": lambda: _events(args.events, args.keys),
            "body to JSON (job)": lambda: batch.model_dump_json(),
        },
        args.repeat,
    )
    read = rows["strict JSON read (server)"]
    print(f"{args.events} events, {args.keys} metric keys each, {len(text) / 1e6:.2f} MB of JSON")
    for name, seconds in rows.items():
        per_event = seconds / args.events * 1e6
        print(f"  {name:<38} {seconds * 1e3:8.2f} ms  {per_event:6.2f} µs/event  "
              f"{seconds / read:5.2f}x the JSON read")  # fmt: skip


if __name__ == "__main__":
    main()
