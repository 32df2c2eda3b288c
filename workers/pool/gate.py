"""Turns on a shared resource of the pool (the trainer, the engine's generation turns),
handed out by weighted fair share (workers/policy/fair_share.py).

A run asks for a turn when it has work waiting (`turn(run)`); whenever a slot is free, the
waiting run with the smallest virtual time gets it, and the seconds it holds the turn are
charged to it. A run that is not asking is never waited for. `exclusive(run)` takes the
resource without the fair pick, for short work that must not overlap a turn (an adapter
export, a checkpoint), still charged to the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

from ..policy.fair_share import FairShare, pick


class FairGate:
    def __init__(self, slots: int = 1, clock: Callable[[], float] = time.perf_counter):
        if slots < 1:
            raise ValueError(f"a gate needs at least one slot, got {slots}")
        self.slots, self.clock = slots, clock
        self.share = FairShare()
        self.busy = 0
        self._cond = asyncio.Condition()

    def join(self, run: str, weight: float = 1.0) -> None:
        self.share.join(run, weight)

    def leave(self, run: str) -> None:
        if run in self.share.clocks:
            self.share.leave(run)

    def metrics(self, run: str) -> dict[str, float]:
        return self.share.run_metrics(run)

    @contextlib.asynccontextmanager
    async def turn(self, run: str) -> AsyncIterator[float]:
        """Wait for the run's fair turn; yields how long it waited."""
        asked = self.clock()
        async with self._cond:
            self.share.ready(run, asked)
            try:
                await self._cond.wait_for(
                    lambda: self.busy < self.slots and pick(self.share.clocks) == run
                )
            except BaseException:  # cancelled while waiting: withdraw the request
                if run in self.share.clocks:
                    self.share.not_ready(run)
                self._cond.notify_all()
                raise
            self.share.next(self.clock())
            self.busy += 1
        async with self._held(run):
            yield self.clock() - asked

    @contextlib.asynccontextmanager
    async def exclusive(self, run: str) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: self.busy < self.slots)
            self.busy += 1
        async with self._held(run):
            yield

    @contextlib.asynccontextmanager
    async def _held(self, run: str) -> AsyncIterator[None]:
        start = self.clock()
        try:
            yield
        finally:
            async with self._cond:
                self.busy -= 1
                if run in self.share.clocks:
                    self.share.charge(run, self.clock() - start)
                self._cond.notify_all()
