"""Progress of a tiny model's build: a line every so often with the share done and the time
left. A build takes from seconds (the tiny arithmetic model) to many minutes on 2 cores (the
demo's chat models), once per machine, and a run that starts on a fresh PADDOCK_HOME spends
that time before its first step: its log says what it is doing and for how long."""

from __future__ import annotations

import time
from collections.abc import Callable

Log = Callable[[str], None]
OnStep = Callable[[int], None]  # a warm-up's callback after each of its steps


def about(seconds: float) -> str:
    """A rough duration: "about 40 s", "about 3 min", "about 1.5 h"."""
    if seconds < 90:
        return f"about {max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"


def time_left(elapsed: float, done: int, total: int) -> float:
    """Seconds left at the rate so far (steps cost about the same throughout a warm-up)."""
    if done <= 0:
        raise ValueError("no step done yet: no rate to extrapolate")
    return elapsed / done * max(total - done, 0)


class BuildProgress:
    """Called with the steps done after each warm-up step; logs at most once per `every_s`
    seconds (the first after `every_s`: a build shorter than that says only its start and
    end)."""

    def __init__(
        self,
        what: str,
        total: int,
        log: Log,
        every_s: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.what, self.total, self.log, self.every_s, self.clock = what, total, log, every_s, clock
        self.start = self.last = clock()

    def __call__(self, done: int) -> None:
        now = self.clock()
        if now - self.last < self.every_s or done >= self.total:
            return
        self.last = now
        left = time_left(now - self.start, done, self.total)
        self.log(
            f"{self.what}: warm-up step {done} of {self.total} "
            f"({100 * done // self.total} %), {about(left)} left"
        )
