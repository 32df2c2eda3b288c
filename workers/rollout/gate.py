"""The gate in front of an asynchronous engine (vLLM, TensorRT-LLM): the state that pause,
resume and abort share with the generate() calls in flight (the torch engine's runs keep
theirs here too; their decode thread is the engine's)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from .base import GroupRequest, GroupResult, PauseMode, Sample


class RequestGate:
    """`open` is False while paused, with the pause `mode`; `aborting` while an abort drains
    the calls in flight (`inflight`, counted from admission to return); `aborted` collects
    the results that came back cut short since the last abort began."""

    def __init__(self) -> None:
        self.cond = asyncio.Condition()
        self.open = True
        self.mode: PauseMode | None = None
        self.aborting = False
        self.inflight = 0
        self.aborted: list[GroupResult] = []

    @property
    def cut(self) -> bool:
        """True when requests must stop (an abort pause, or an abort in progress)."""
        return self.mode == "abort" or self.aborting

    async def run(
        self,
        requests: list[GroupRequest],
        group: Callable[[GroupRequest], Awaitable[GroupResult]],
    ) -> list[GroupResult]:
        """`group` over the requests, each on its own, once admitted (see `run_all`)."""
        return await self.run_all(requests, lambda reqs: asyncio.gather(*(group(r) for r in reqs)))

    async def run_all(
        self,
        requests: list[GroupRequest],
        generate: Callable[[list[GroupRequest]], Awaitable[list[GroupResult]]],
    ) -> list[GroupResult]:
        """`generate` over the requests together, once admitted. Held while paused; under
        an abort, back at once with the requests as they came (`unfinished`): the caller
        may be stopping and must not block here."""
        async with self.cond:
            await self.cond.wait_for(lambda: self.open or self.cut)
            if not self.open or self.aborting:
                return [unfinished(r) for r in requests]
            self.inflight += 1
        try:
            results = list(await generate(requests))
            self.aborted += [r for r in results if r.aborted]
            return results
        finally:
            async with self.cond:  # decremented under the lock, not computed before it
                self.inflight -= 1
                self.cond.notify_all()

    async def change(self, **state) -> None:
        """Set attributes of the gate and wake everything waiting on it."""
        async with self.cond:
            for name, value in state.items():
                setattr(self, name, value)
            self.cond.notify_all()

    async def close(self, mode: PauseMode) -> None:
        await self.change(open=False, mode=mode)

    async def reopen(self) -> None:
        await self.change(open=True, mode=None)

    async def wait(self, predicate: Callable[[], bool]) -> None:
        async with self.cond:
            await self.cond.wait_for(predicate)

    async def idle(self) -> None:
        """Until every admitted generate() call has returned."""
        await self.wait(lambda: self.inflight == 0)


def unfinished(req: GroupRequest) -> GroupResult:
    """The request handed back as it came, its unfinished samples marked aborted (so the
    caller resubmits them)."""
    samples = [
        Sample(
            list(s.token_ids),
            list(s.logprobs),
            list(s.versions),
            s.finish_reason if s.done else "abort",
            s.text,
        )
        for s in (req.partial or [Sample() for _ in range(req.n)])
    ]
    return GroupResult(req.request_id, req.prompt_ids, samples)
