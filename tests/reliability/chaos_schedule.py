"""The chaos suite's seeded schedule of faults, and the figures it reports (pure functions).

A schedule is a list of (second into the chaos window, kind), drawn from one seed: every kind
at least once, each a number of times that grows with the window, at moments spread over it
with no two faults closer than a few seconds (so that each one's recovery can be told
apart). Which run a fault hits is chosen when it fires, among the runs then running, by a
generator of the same seed; which runs are running by then depends on the machine's speed,
so a seed fixes the schedule, not the whole trajectory."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

# What the schedule injects. Platform-wide: the ASGI server, the Celery worker (with beat),
# Redis, PostgreSQL. Per run: its job's driver, its rollout engine process, a network
# partition of its job, a user's pause (then resume) and a user's abort.
KINDS = (
    "asgi_kill",
    "celery_kill",
    "redis_restart",
    "postgres_restart",
    "driver_kill",
    "engine_kill",
    "partition",
    "pause_resume",
    "abort",
)
PER_RUN = frozenset({"driver_kill", "engine_kill", "partition", "pause_resume", "abort"})
# one of each kind per this many seconds of window (at least one of each)
SECONDS_PER_ROUND = 90.0
MIN_GAP_S = 3.0


@dataclass(frozen=True)
class Fault:
    at_s: float
    kind: str


def schedule(seed: int, seconds: float, kinds: tuple[str, ...] = KINDS) -> list[Fault]:
    rng = random.Random(seed)
    rounds = max(1, math.floor(seconds / SECONDS_PER_ROUND))
    picks = [kind for kind in kinds for _ in range(rounds)]
    rng.shuffle(picks)
    # evenly spaced slots, each moment jittered inside its slot: random moments, yet never
    # two faults within MIN_GAP_S of each other
    slot = seconds / len(picks)
    jitter = max(0.0, slot - MIN_GAP_S)
    return [
        Fault(round(i * slot + rng.uniform(0, jitter), 2), kind) for i, kind in enumerate(picks)
    ]


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by linear interpolation between the nearest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    where = q * (len(ordered) - 1)
    low, high = math.floor(where), math.ceil(where)
    return ordered[low] + (ordered[high] - ordered[low]) * (where - low)
