"""What building the live stream's messages with their models costs, beside encoding them,
in one run.

    .venv/bin/python bench/live_messages.py            # --keys 20 --logs 100 --repeat 200

The platform builds every websocket message with its model of workers/live_messages.py
(validated, then dumped) and encodes it with json.dumps as before. Measured, medians of
`--repeat` rounds, the parts taking turns in every round:
  - a snapshot as a connect sends it on PostgreSQL (the points written by the database, so
    the model holds none): `SnapshotMessage.model_validate` of its rows and the dump, as
    live/snapshots.py builds it, against json.dumps of the dumped message alone, what the
    encoding costs (run, `--keys` latest values, `--logs` log rows, 5 sample sets of 4
    items);
  - a batch's live messages as ingest builds them once for every viewer: a metrics message
    of one step of `--keys` values, a log line, a sample set, a checkpoint; against
    json.dumps of the same messages.
No database and no network: the figures are CPU per message, printed with their ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

from ingest_validate import medians_s  # noqa: E402  (bench/: the parts take turns each round)

from workers.live_messages import (  # noqa: E402
    CheckpointMessage,
    Cursor,
    LogMessage,
    MetricsMessage,
    MetricStep,
    SamplesMessage,
    SnapshotMessage,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--logs", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    t = 1764490000.0
    latest = {f"metric/{i:02d}": 0.1 * i for i in range(args.keys)}
    logs = [{"id": i, "time": t + i, "level": "info", "message": f"step {i} " + "x" * 60,
             "kind": "log"} for i in range(args.logs)]  # fmt: skip
    item = {"prompt": "p" * 60, "completion": "c" * 60, "reward": 1.0, "advantage": 0.5,
            "adapter_version": 3, "terms": {"exact": 1.0},
            "details": {"exact": {"x": 1}}}  # fmt: skip
    samples = [{"step": s, "items": [item] * 4} for s in range(5)]
    run = {"state": "running", "desired_state": "running", "step": 7, "total_steps": 50,
           "backend": "torch", "seed": 0, "error": "", "queued_reason": ""}  # fmt: skip
    cursor = {"dispatch": 1, "seq": 42}

    def snapshot():  # as live/snapshots.py builds it
        return SnapshotMessage.model_validate(
            {"run_id": 7, "cursor": cursor, "run": run, "latest": latest, "points": {},
             "logs": logs, "samples": samples}
        ).model_dump()  # fmt: skip

    def batch():
        c = Cursor(**cursor)
        metrics = MetricsMessage(
            run_id=7, cursor=c, steps=[MetricStep(step=8, time=t, values=latest)]
        ).model_dump()
        others = [
            LogMessage(run_id=7, cursor=c, **logs[0]),
            SamplesMessage(run_id=7, cursor=c, **samples[0]),
            CheckpointMessage(run_id=7, cursor=c, step=8, uri="file:///a/runs/7/ck/8",
                              adapter_version=8),
        ]  # fmt: skip
        return [metrics, *(m.model_dump() for m in others)]

    built_snapshot, built_batch = snapshot(), batch()
    medians = medians_s(
        {
            "snapshot: model": snapshot,
            "snapshot: json.dumps": lambda: json.dumps(built_snapshot),
            "batch: models": batch,
            "batch: json.dumps": lambda: [json.dumps(m) for m in built_batch],
        },
        args.repeat,
    )
    for what, model_key in (("snapshot", "snapshot: model"), ("batch", "batch: models")):
        model, dumps = medians[model_key], medians[f"{what}: json.dumps"]
        print(
            f"{what:8s}  model build + dump {model * 1e6:8.1f} µs   "
            f"json.dumps {dumps * 1e6:8.1f} µs   model / json.dumps {model / dumps:5.2f}"
        )


if __name__ == "__main__":
    main()
