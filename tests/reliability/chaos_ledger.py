"""The chaos suite's books: what the platform acknowledged to the jobs against what it stored
(pure functions over plain rows, so the argument can be read and tested apart from the run).

Why this is the sound comparison. "Acknowledged" is what the job was told: a 200 reply whose
`ack` is the batch's seq, handed to the job's socket. The proxy between the jobs and the
platform (chaos_proxy.py) records exactly those replies with the batch they answer, so the
ledger comes from neither side it checks. The job's own files cannot give it: the reporter
deletes a batch from its spool once acknowledged, and a kill -9 loses events still in its
memory queue, which are then neither acknowledged nor stored (no loss) but look, from
metrics.jsonl alone, just like points the platform dropped.

An acknowledged batch's promises (docs/ingest-protocol.md):
- its (run, dispatch, seq) is stored, once;
- each log event in it is stored once: a log is appended, never keyed, so a retried batch
  stored twice shows as two rows;
- each metric point (run, key, step) is stored, once (a unique index), and holds the
  acknowledged value, or the value a later dispatch of the run re-emitted for that step
  after a resume (a later dispatch replaces; an earlier one never may). A later dispatch's
  value is recognised by its (step, time) among that dispatch's emissions: its acknowledged
  batches and its metrics.jsonl (a point stored whose reply was lost is in the latter).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# (run, key, step) -> (time, value) as stored
StoredPoints = dict[tuple[int, str, int], tuple[float, float]]


@dataclass
class Books:
    batches_acknowledged: int = 0
    batches_lost: list[tuple[int, int, int]] = field(default_factory=list)
    batches_duplicated: list[tuple[int, int, int]] = field(default_factory=list)
    seq_reused: list[tuple[int, int, int]] = field(default_factory=list)
    points_acknowledged: int = 0
    points_replaced_by_a_later_dispatch: int = 0
    points_lost: list[tuple[int, str, int, int]] = field(default_factory=list)
    point_rows_duplicated: list[tuple[int, str, int]] = field(default_factory=list)
    logs_acknowledged: int = 0
    logs_lost: list[tuple[int, int, str]] = field(default_factory=list)
    logs_duplicated: list[tuple[int, int, str]] = field(default_factory=list)

    @property
    def losses(self) -> int:
        return len(self.batches_lost) + len(self.points_lost) + len(self.logs_lost)

    @property
    def duplicates(self) -> int:
        return (
            len(self.batches_duplicated)
            + len(self.point_rows_duplicated)
            + len(self.logs_duplicated)
            + len(self.seq_reused)
        )


def _stamp(t: float) -> datetime:
    """A log event's time as the platform stores it (live/ingest.py `_when`)."""
    return datetime.fromtimestamp(t, tz=UTC)


def books(
    *,
    acks: list[Any],  # chaos_proxy.Ack: run_id, dispatch, seq, events
    emitted: dict[tuple[int, int], set[tuple[int, float]]],  # (run, dispatch) -> {(step, time)}
    stored_batches: list[tuple[int, int, int]],  # (run, dispatch, seq), every row
    stored_points: list[tuple[int, str, int, float, float]],  # (run, key, step, time, value)
    stored_logs: list[tuple[int, int, str, datetime]],  # (run, dispatch, message, time)
) -> Books:
    out = Books()
    batch_rows = Counter(stored_batches)
    out.batches_duplicated = sorted(b for b, n in batch_rows.items() if n > 1)
    point_rows = Counter((r, k, s) for r, k, s, _, _ in stored_points)
    out.point_rows_duplicated = sorted(p for p, n in point_rows.items() if n > 1)
    points: StoredPoints = {(r, k, s): (t, v) for r, k, s, t, v in stored_points}
    log_rows = Counter(stored_logs)

    # one ack per batch (a resend whose first reply was lost is acknowledged again: the
    # same events, or the protocol was broken by the client)
    seen: dict[tuple[int, int, int], list] = {}
    for ack in acks:
        key = (ack.run_id, ack.dispatch, ack.seq)
        if key in seen:
            if seen[key] != ack.events:
                out.seq_reused.append(key)
            continue
        seen[key] = ack.events
    # (run, step, time) -> the dispatch that emitted it, from every source we have
    by_emission: dict[tuple[int, int, float], int] = {}
    for (run, dispatch), steps in emitted.items():
        for step, t in steps:
            by_emission[(run, step, t)] = dispatch
    for (run, dispatch, _), events in seen.items():
        for event in events:
            if event["type"] == "metric":
                by_emission.setdefault((run, event["step"], event["time"]), dispatch)

    for (run, dispatch, seq), events in sorted(seen.items()):
        out.batches_acknowledged += 1
        if batch_rows[(run, dispatch, seq)] == 0:
            out.batches_lost.append((run, dispatch, seq))
        for event in events:
            if event["type"] == "log":
                out.logs_acknowledged += 1
                n = log_rows[(run, dispatch, event["message"], _stamp(event["time"]))]
                if n == 0:
                    out.logs_lost.append((run, dispatch, event["message"][:80]))
                elif n > 1:
                    out.logs_duplicated.append((run, dispatch, event["message"][:80]))
            elif event["type"] == "metric":
                for key, value in event["values"].items():
                    out.points_acknowledged += 1
                    stored = points.get((run, key, event["step"]))
                    if stored == (event["time"], value):
                        continue
                    later = stored is not None and (
                        by_emission.get((run, event["step"], stored[0]), 0) > dispatch
                    )
                    if later:
                        out.points_replaced_by_a_later_dispatch += 1
                    else:
                        out.points_lost.append((run, key, event["step"], dispatch))
    # a log duplicated by a retry is one acknowledged log stored twice: counted above; a
    # duplicate of any other stored log (say, a status warning) is no promise of ingest
    return out
