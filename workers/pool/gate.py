"""Turns on a shared resource of the pool (the trainer, the engine's generation turns),
handed out by weighted fair share (workers/policy/fair_share.py).

A run asks for a turn when it has work waiting (`turn(run)`); whenever a slot is free, the
waiting run with the smallest virtual time gets it, and the seconds it holds the turn are
charged to it. A run that is not asking is never waited for. A run may ask again before its
earlier turns end (an episode's turns overlap, an evaluation asks while the producer's turn
runs): it stays ready while any of its asks waits, and each ask gets a turn of its own.
`exclusive(run)` takes the resource without the fair pick, for short work that must not
overlap a turn (an adapter export, a checkpoint), still charged to the run.

`TrainTurns` over a gate: one turn steps every run whose work is waiting, together (the
pool's batched train step). A run's work goes in the next turn that starts after it is
ready, never held for another run's: a turn starts as soon as the resource is free and
takes what is waiting then, alone if only one run is.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..policy.fair_share import FairShare, pick


class FairGate:
    def __init__(self, slots: int = 1, clock: Callable[[], float] = time.perf_counter):
        if slots < 1:
            raise ValueError(f"a gate needs at least one slot, got {slots}")
        self.slots, self.clock = slots, clock
        self.share = FairShare()
        self.busy = 0
        self.asks: Counter[str] = Counter()  # each run's turns asked for and not yet given
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
            self.asks[run] += 1
            try:
                await self._cond.wait_for(
                    lambda: self.busy < self.slots and pick(self.share.clocks) == run
                )
            except BaseException:  # cancelled while waiting: withdraw the request
                self.asks[run] -= 1
                if run in self.share.clocks and not self.asks[run]:
                    self.share.not_ready(run)
                self._cond.notify_all()
                raise
            self.asks[run] -= 1
            now = self.clock()
            self.share.next(now)
            if self.asks[run]:  # another ask of this run still waits: it stays ready
                self.share.ready(run, now)
            self.busy += 1
            # the pick has moved on: a waiter it names may take another free slot now
            self._cond.notify_all()
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


class TrainTurns:
    """Turns of a gate's resource, each taking every waiting run's work at once:
    `step_many({run: work})` (in a thread) returns each run's result or exception. The
    runs go in fair order (smallest virtual time first), at most `max_runs` a turn; the
    turn's seconds are charged to its runs in proportion to `cost(work)` (e.g. tokens)."""

    def __init__(
        self,
        gate: FairGate,
        step_many: Callable[[dict[str, Any]], dict[str, Any]],
        cost: Callable[[Any], float] | None = None,
        max_runs: int | None = None,
    ):
        if gate.slots != 1:
            raise ValueError("batched turns need a gate of one slot")
        self.gate, self.step_many = gate, step_many
        self.cost = cost or (lambda work: 1.0)
        self.max_runs = max_runs
        self.pending: dict[str, tuple[Any, asyncio.Future]] = {}
        self.sizes: Counter[int] = Counter()  # turns by how many runs each took
        self._driver: asyncio.Task | None = None

    async def step(self, run: str, work: Any) -> Any:
        """The run's work done in the next turn; its result (an exception is raised)."""
        g = self.gate
        fut = asyncio.get_running_loop().create_future()
        async with g._cond:
            if run in self.pending:
                raise RuntimeError(f"run {run!r} already has a step waiting")
            self.pending[run] = (work, fut)
            g.share.ready(run, g.clock())
            if self._driver is None or self._driver.done():
                self._driver = asyncio.create_task(self._drive(), name="paddock-pool-trainer")
            g._cond.notify_all()
        try:
            result = await asyncio.shield(fut)
        except asyncio.CancelledError:  # withdrawn before its turn took it: not stepped
            async with g._cond:
                if self.pending.get(run, (None, None))[1] is fut:
                    del self.pending[run]
                    if run in g.share.clocks:
                        g.share.not_ready(run)
                g._cond.notify_all()
            raise
        if isinstance(result, BaseException):
            raise result
        return result

    async def _drive(self) -> None:
        g = self.gate
        while True:
            async with g._cond:
                await g._cond.wait_for(lambda: not self.pending or g.busy < g.slots)
                if not self.pending:
                    return
                known = {r: c for r, c in g.share.clocks.items() if r in self.pending}
                for run in [r for r in self.pending if r not in known]:  # left meanwhile
                    _, fut = self.pending.pop(run)
                    fut.set_result(KeyError(f"run {run!r} is not in the pool"))
                share = FairShare(known, g.share.vnow)  # the pick among the waiting runs
                take = share.next_many(g.clock(), self.max_runs)
                g.share.vnow = share.vnow
                if not take:
                    continue
                works = {r: self.pending.pop(r) for r in take}
                g.busy += 1
            self.sizes[len(take)] += 1
            start = g.clock()
            results: dict[str, Any] = {}
            try:
                results = await asyncio.to_thread(
                    self.step_many, {r: w for r, (w, _) in works.items()}
                )
            except Exception as exc:
                results = dict.fromkeys(works, exc)
            finally:
                elapsed = g.clock() - start
                async with g._cond:
                    g.busy -= 1
                    costs = {r: max(float(self.cost(w)), 0.0) for r, (w, _) in works.items()}
                    total = sum(costs.values())
                    for r in works:
                        if r in g.share.clocks:
                            part = costs[r] / total if total > 0 else 1.0 / len(works)
                            g.share.charge(r, elapsed * part)
                    for r, (_, fut) in works.items():
                        if not fut.done():
                            res = results.get(r, RuntimeError(f"run {r!r}: no result"))
                            fut.set_result(res)
                    g._cond.notify_all()
