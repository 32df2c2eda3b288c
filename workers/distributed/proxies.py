"""What the driver holds in a Ray run: a TrainerExecutor over the trainer actors and a
RolloutBackend over the rollout actors. The driver cannot tell them from the in-process
ones, which is the point: one loop, two executors."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from ..adapters.update import AdapterUpdate
from ..policy import TrainSample
from ..rollout.base import GroupRequest, GroupResult, PauseMode
from ..rollout.registry import engine_class
from .fleet import ActorDied, Member, call, call_all


@dataclass
class PublishedAdapter(AdapterUpdate):
    """An adapter version already in the object store (put once by trainer rank 0); the
    rollout actors read it from there, the driver never copies it."""

    ref: Any = None  # ray.ObjectRef of dict[str, Tensor]


class RayTrainerExecutor:
    """TrainerExecutor over N trainer ranks. Every rank gets the whole batch (one object-store
    copy) and takes part in every call, since FSDP's gathers are collectives; rank 0's
    answers speak for the group."""

    def __init__(self, trainers: list[Member], adapter_version: int = 0):
        self.trainers = trainers
        self._version = adapter_version

    @property
    def adapter_version(self) -> int:
        return self._version

    async def train_step(self, samples: list[TrainSample]) -> dict[str, float]:
        ref = ray.put(samples)
        (version, metrics), *_ = await call_all(self.trainers, "train_step", ref)
        self._version = version
        return metrics

    async def adapter_update(self, with_probe: bool = True) -> AdapterUpdate:
        (version, refs, probe), *_ = await call_all(self.trainers, "publish", with_probe)
        return PublishedAdapter(version, probe=probe, ref=refs[0])

    async def save(self, out: Path) -> None:
        await call_all(self.trainers, "save", str(out))

    async def load(self, src: Path) -> None:
        self._version, *_ = await call_all(self.trainers, "load", str(src))


class RayRolloutBackend:
    """RolloutBackend over R rollout actors: a batch of groups is split into R contiguous
    shares (a group's samples depend only on its own seed, so the split changes nothing),
    control calls go to every actor.

    The handshake holds per actor: an actor labels a token with the version its engine
    acknowledged, and this proxy checks each new token's label against that actor's
    acknowledgements before the driver sees it."""

    placeable = False  # its engines are the actors' own

    def __init__(self, actors: list[Member], name: str):
        self.actors = actors
        self.name = name
        self.needs_probe = engine_class(name).needs_probe  # as the actors' engines declare
        self.acked: list[set[int]] = [set() for _ in actors]
        self._served = [-1] * len(actors)
        self.failure: ActorDied | None = None

    @property
    def served_version(self) -> int:
        return min(self._served)

    async def _all(self, method: str, *args: Any) -> list[Any]:
        if self.failure is not None:
            raise self.failure
        try:
            return await call_all(self.actors, method, *args)
        except ActorDied as exc:
            self.failure = exc
            raise

    async def generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        if self.failure is not None:
            raise self.failure
        n = len(self.actors)
        bounds = [len(requests) * i // n for i in range(n + 1)]
        shares = [(i, requests[bounds[i] : bounds[i + 1]]) for i in range(n)]
        shares = [(i, share) for i, share in shares if share]
        try:
            parts = await asyncio.gather(
                *(
                    call(self.actors[i], self.actors[i].handle.generate.remote(share))
                    for i, share in shares
                )
            )
        except ActorDied as exc:
            self.failure = exc
            raise
        out: list[GroupResult] = []
        for (i, share), results in zip(shares, parts, strict=True):
            for req, res in zip(share, results, strict=True):
                self._check_labels(i, req, res)
            out += results
        return out

    def _check_labels(self, i: int, req: GroupRequest, res: GroupResult) -> None:
        for j, sample in enumerate(res.samples):
            carried = len(req.partial[j].versions) if req.partial else 0
            new = set(sample.versions[carried:])
            if not new <= self.acked[i]:
                raise RuntimeError(
                    f"{self.actors[i].who} labelled tokens of {req.request_id} with adapter "
                    f"versions {sorted(new - self.acked[i])} it never acknowledged "
                    f"(acknowledged: {sorted(self.acked[i])})"
                )

    async def load_adapter(self, update: AdapterUpdate) -> int:
        """Every actor loads the version and acknowledges it; the ack is that version only if
        all of them acknowledged exactly it."""
        if isinstance(update, PublishedAdapter):
            ref = update.ref
        elif update.tensors is not None:
            ref = ray.put(update.tensors)
        else:
            raise ValueError(f"adapter update {update.version}: the Ray backend takes tensors")
        acks = await self._all("load_adapter", update.version, ref, update.probe)
        for i, ack in enumerate(acks):
            self.acked[i].add(ack)
            self._served[i] = ack
        wrong = [ack for ack in acks if ack != update.version]
        return wrong[0] if wrong else update.version

    async def pause(self, mode: PauseMode) -> None:
        await self._all("pause", mode)

    async def resume(self) -> None:
        await self._all("resume")

    async def abort(self) -> list[GroupResult]:
        parts = await self._all("abort")
        return [r for part in parts for r in part]

    async def close(self) -> None:
        # After a death the run is failing already and the fleet is killed as a whole.
        if self.failure is None:
            await self._all("close")
