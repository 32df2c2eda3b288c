"""Several engines behind one backend (the torchrun launcher's rollout replicas).

A batch of groups is split into contiguous shares, one per engine: a group's samples depend
only on its own seed, so the split changes no sample. Control calls go to every engine; an
adapter counts as served only when every engine acknowledged the same version."""

from __future__ import annotations

import asyncio

from ..adapters.update import AdapterUpdate
from ..shares import contiguous_shares
from .base import GroupRequest, GroupResult, PauseMode, RolloutBackend


class ReplicaSet:
    placeable = False  # made of engines already placed

    def __init__(self, engines: list[RolloutBackend]):
        if not engines:
            raise ValueError("a replica set needs at least one engine")
        self.engines = engines
        self.name = engines[0].name
        self.needs_probe = any(e.needs_probe for e in engines)

    @property
    def served_version(self) -> int:
        return min(e.served_version for e in self.engines)

    async def generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        parts = [requests[a:b] for a, b in contiguous_shares(len(requests), len(self.engines))]
        done = await asyncio.gather(
            *(e.generate(part) for e, part in zip(self.engines, parts, strict=True) if part)
        )
        return [result for part in done for result in part]

    async def load_adapter(self, update: AdapterUpdate) -> int:
        acks = await asyncio.gather(*(e.load_adapter(update) for e in self.engines))
        if len(set(acks)) != 1:
            raise RuntimeError(f"{self.name} replicas acknowledged different versions: {acks}")
        return acks[0]

    async def pause(self, mode: PauseMode) -> None:
        await asyncio.gather(*(e.pause(mode) for e in self.engines))

    async def resume(self) -> None:
        await asyncio.gather(*(e.resume() for e in self.engines))

    async def abort(self) -> list[GroupResult]:
        parts = await asyncio.gather(*(e.abort() for e in self.engines))
        return [result for part in parts for result in part]

    async def close(self) -> None:
        await asyncio.gather(*(e.close() for e in self.engines))
