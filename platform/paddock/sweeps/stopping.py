"""Early-stopping rules, as pure functions of the members' metric tables.

A table is, per member, the (step, value) points of one metric in step order. Each rule
says which of the candidate members (those still training) to stop, and why, from the
tables alone, so the same tables always give the same answer (tests/platform/sweeps/
test_stopping.py works them out by hand).

- `median` (the median stopping rule of Google Vizier, Golovin et al. 2017): a member is
  stopped at step s when the best value it reached by s is worse than the median of the
  other members' running means up to s. s is the member's latest step, or the latest step
  that `min_members` other members have reached too (members run side by side: the one in
  front is compared as soon as enough others have caught up to some step of its), and at
  least `min_steps`. Members that finished or were stopped count for the steps they
  reached.
- `threshold`: a member whose best value by its latest step s ≥ `min_steps` is still worse
  than `threshold` is stopped.

`mode` says which way is better: `max` (a reward, an accuracy) or `min` (a loss)."""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Points = Sequence[tuple[int, float]]  # (step, value), steps increasing
Mode = Literal["max", "min"]


@dataclass(frozen=True)
class StoppingRule:
    rule: Literal["median", "threshold"]
    min_steps: int
    min_members: int = 3  # median: others that must have reached the step compared at
    threshold: float | None = None  # threshold: the value a member must reach

    def describe(self) -> dict:
        out: dict = {"rule": self.rule, "min_steps": self.min_steps}
        if self.rule == "median":
            out["min_members"] = self.min_members
        else:
            out["threshold"] = self.threshold
        return out


def _better(a: float, b: float, mode: Mode) -> bool:
    return a > b if mode == "max" else a < b


def best_by(points: Points, step: int, mode: Mode) -> float | None:
    """The best value at a step ≤ `step`, or None without one."""
    values = [v for s, v in points if s <= step]
    if not values:
        return None
    return max(values) if mode == "max" else min(values)


def running_mean(points: Points, step: int) -> float | None:
    values = [v for s, v in points if s <= step]
    return sum(values) / len(values) if values else None


def _last_step(points: Points) -> int | None:
    return points[-1][0] if points else None


def _median_verdict(
    member: Hashable, tables: Mapping[Hashable, Points], rule: StoppingRule, mode: Mode
) -> str | None:
    mine = tables.get(member) or ()
    latest = _last_step(mine)
    if latest is None:
        return None
    reached = sorted(
        (last for other, points in tables.items()
         if other != member and (last := _last_step(points)) is not None),
        reverse=True,
    )  # fmt: skip
    if len(reached) < rule.min_members:
        return None
    # the latest step of its own that min_members others have reached as well
    at = max((s for s, _ in mine if s <= reached[rule.min_members - 1]), default=None)
    if at is None or at < rule.min_steps:
        return None
    others = [
        running_mean(points, at)
        for other, points in tables.items()
        if other != member and (_last_step(points) or -1) >= at
    ]
    others = [m for m in others if m is not None]
    if len(others) < rule.min_members:
        return None
    median = statistics.median(others)
    best = best_by(mine, at, mode)
    if best is None or not _better(median, best, mode):
        return None
    word = "below" if mode == "max" else "above"
    return (
        f"median stopping at step {at}: its best {best:.4g} is {word} the median "
        f"{median:.4g} of {len(others)} other members' running means"
    )


def _threshold_verdict(
    member: Hashable, tables: Mapping[Hashable, Points], rule: StoppingRule, mode: Mode
) -> str | None:
    mine = tables.get(member) or ()
    latest = _last_step(mine)
    if latest is None or latest < rule.min_steps or rule.threshold is None:
        return None
    best = best_by(mine, latest, mode)
    if best is None or not _better(rule.threshold, best, mode):
        return None
    word = "below" if mode == "max" else "above"
    return f"threshold at step {latest}: its best {best:.4g} is still {word} {rule.threshold:g}"


def stop_decisions(
    rule: StoppingRule,
    *,
    mode: Mode,
    tables: Mapping[Hashable, Points],
    candidates: Iterable[Hashable],
) -> dict[Hashable, str]:
    """Which `candidates` (members still training) the rule stops, each with the reason.
    `tables` holds every member that reported (candidates, and members that finished or
    were stopped: the median compares against them too)."""
    verdict = _median_verdict if rule.rule == "median" else _threshold_verdict
    decisions = {}
    for member in candidates:
        reason = verdict(member, tables, rule, mode)
        if reason is not None:
            decisions[member] = reason
    return decisions


def best_member(bests: Mapping[Hashable, float | None], mode: Mode) -> Hashable | None:
    """The member with the best value so far (ties: the first), or None."""
    found = None
    for member, value in bests.items():
        if value is None:
            continue
        if found is None or _better(value, bests[found], mode):  # type: ignore[arg-type]
            found = member
    return found
