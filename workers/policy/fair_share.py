"""Which pooled run's train step goes next: weighted fair sharing of one trainer's time.

Each run has a weight (1 by default; a run setting raises or lowers it) and a *virtual
time*: the trainer seconds it has used divided by its weight. The next step goes to the
ready run (one whose batch is waiting) with the smallest virtual time, so over any stretch
where runs stay ready each gets trainer time in proportion to its weight, whatever its steps
cost (start-time fair queueing). A run that is not ready (still generating, paused) is
skipped, never waited for: a run's step is never held up by another run's rollouts. It
earns no credit while it is not ready: when it becomes ready, or joins, its virtual time is
brought up to the pool's (that of the step last started), so it cannot claim the trainer for
the time it was away.

A trainer that steps several runs in one forward and backward (workers/policy/policy.py)
takes every ready run at once (`next_many`, in this order, up to a limit) and charges each
its part of the turn's time; weights then order the runs and decide who goes when more
are ready than a turn takes.

Pure bookkeeping with the clock passed in: what `pool/share` (the trainer time a run got
over a window, as a fraction) and `pool/wait_s` (how long its last ready batch waited for
the trainer) report comes from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..names import POOL_METRICS

SHARE, WAIT_S = POOL_METRICS[0], POOL_METRICS[1]


@dataclass
class RunClock:
    weight: float = 1.0
    used_s: float = 0.0  # trainer seconds, since the run joined
    vtime: float = 0.0  # used_s / weight, shifted to the pool's time at join
    ready_since: float | None = None  # when its waiting batch became ready
    last_wait_s: float = 0.0
    window_s: float = 0.0  # trainer seconds in the current metrics window
    # the run's own window (`run_metrics`): its used_s and the pool's total at its last report
    mark_used_s: float = 0.0
    mark_total_s: float = 0.0


def pick(clocks: dict[str, RunClock]) -> str | None:
    """The ready run with the smallest virtual time (ties: the longest waiting, then by
    id, so the choice is deterministic); None when no run is ready."""
    ready = [(c.vtime, c.ready_since, r) for r, c in clocks.items() if c.ready_since is not None]
    return min(ready)[2] if ready else None


def target_shares(weights: dict[str, float]) -> dict[str, float]:
    """Each run's share of the trainer by weight: what `pick` converges to while every run
    stays ready."""
    total = sum(weights.values())
    return {run: w / total for run, w in weights.items()} if total > 0 else {}


@dataclass
class FairShare:
    """The trainer's schedule over the runs of a pool."""

    clocks: dict[str, RunClock] = field(default_factory=dict)
    vnow: float = 0.0  # the virtual time of the step last started
    total_s: float = 0.0  # trainer seconds charged to any run

    def join(self, run: str, weight: float = 1.0) -> None:
        if weight <= 0:
            raise ValueError(f"run {run!r}: a pool weight must be > 0, got {weight}")
        if run in self.clocks:
            raise ValueError(f"run {run!r} is already scheduled")
        self.clocks[run] = RunClock(weight=weight, vtime=self.vnow, mark_total_s=self.total_s)

    def leave(self, run: str) -> None:
        del self.clocks[run]

    def set_weight(self, run: str, weight: float) -> None:
        if weight <= 0:
            raise ValueError(f"run {run!r}: a pool weight must be > 0, got {weight}")
        self.clocks[run].weight = weight

    def ready(self, run: str, now: float) -> None:
        """The run has a batch waiting for the trainer (from `now`)."""
        c = self.clocks[run]
        if c.ready_since is not None:
            return
        c.vtime = max(c.vtime, self.vnow)
        c.ready_since = now

    def not_ready(self, run: str) -> None:
        """The run has nothing to train (paused, or its batch was withdrawn)."""
        self.clocks[run].ready_since = None

    def next(self, now: float) -> str | None:
        """The run whose step goes now; its wait is recorded and it is no longer ready."""
        run = pick(self.clocks)
        if run is not None:
            c = self.clocks[run]
            c.last_wait_s = now - c.ready_since
            c.ready_since = None
            self.vnow = c.vtime
        return run

    def next_many(self, now: float, limit: int | None = None) -> list[str]:
        """The ready runs whose steps go now together (a batched trainer turn), in fair
        order (smallest virtual time first), at most `limit` of them: each one's wait is
        recorded and it is no longer ready."""
        out = []
        while limit is None or len(out) < limit:
            run = self.next(now)
            if run is None:
                break
            out.append(run)
        return out

    def charge(self, run: str, seconds: float) -> None:
        """The trainer spent `seconds` on the run's step."""
        c = self.clocks[run]
        c.used_s += seconds
        c.window_s += seconds
        c.vtime += seconds / c.weight
        self.total_s += seconds

    def metrics(self) -> dict[str, dict[str, float]]:
        """Per run, `pool/share` (its fraction of the trainer time of the window since the
        last call) and `pool/wait_s` (its last batch's wait); starts a new window."""
        total = sum(c.window_s for c in self.clocks.values())
        out = {
            run: {
                SHARE: c.window_s / total if total > 0 else 0.0,
                WAIT_S: c.last_wait_s,
            }
            for run, c in self.clocks.items()
        }
        for c in self.clocks.values():
            c.window_s = 0.0
        return out

    def run_metrics(self, run: str) -> dict[str, float]:
        """One run's `pool/share` over its own window (since its last call: each run reports
        at its own steps) and its `pool/wait_s`; starts the run's next window."""
        c = self.clocks[run]
        own, total = c.used_s - c.mark_used_s, self.total_s - c.mark_total_s
        c.mark_used_s, c.mark_total_s = c.used_s, self.total_s
        return {SHARE: own / total if total > 0 else 0.0, WAIT_S: c.last_wait_s}
