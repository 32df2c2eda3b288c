"""The actors of one Ray run, in one placement group: created together, awaited through one
helper that names the actor that died, and torn down together."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import RayActorError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..spec import RunSpec
from .actors import RolloutActor, TrainerActor

PLACEMENT_TIMEOUT_S = float(os.environ.get("PADDOCK_PLACEMENT_TIMEOUT_S", "120"))


class ActorDied(RuntimeError):
    """A trainer or rollout actor of the run is gone (killed, crashed, node lost)."""

    def __init__(self, who: str, cause: BaseException):
        self.who = who
        reason = str(cause).strip().splitlines()
        super().__init__(f"{who} died: {' '.join(reason[:3]) or type(cause).__name__}")


@dataclass
class Member:
    """One actor, with what an error message needs to say which one failed."""

    handle: Any
    role: str  # "trainer actor 0 of 2", "rollout actor 1 of 2"
    where: dict[str, Any] = field(default_factory=dict)

    @property
    def who(self) -> str:
        w = self.where
        return f"{self.role} (pid {w.get('pid', '?')} on {w.get('host', '?')})"


async def call(member: Member, ref: Awaitable[Any]) -> Any:
    """Await one actor call; a dead actor becomes an ActorDied naming it. Errors raised by the
    actor's own code propagate as they are (Ray re-raises them with the actor's traceback)."""
    try:
        return await ref
    except RayActorError as exc:
        raise ActorDied(member.who, exc) from exc


async def call_all(members: list[Member], method: str, *args: Any) -> list[Any]:
    return await asyncio.gather(
        *(call(m, getattr(m.handle, method).remote(*args)) for m in members)
    )


def bundles(spec: RunSpec) -> list[dict[str, float]]:
    """Trainer bundles first, then one per rollout replica."""
    r = spec.resources
    if r.trainer_gpus % r.trainer_actors:
        raise ValueError(
            f"resources.trainer_gpus ({r.trainer_gpus}) must split evenly over "
            f"resources.trainer_actors ({r.trainer_actors})"
        )
    trainer = {"CPU": r.trainer_cpus, "GPU": r.trainer_gpus / r.trainer_actors}
    rollout = {"CPU": r.rollout_cpus, "GPU": r.rollout_gpus}
    out = [trainer] * r.trainer_actors + [rollout] * r.rollout_replicas
    return [{k: v for k, v in b.items() if v > 0} for b in out]


@dataclass
class Fleet:
    pg: Any
    trainers: list[Member]
    rollouts: list[Member]

    @classmethod
    def start(cls, spec: RunSpec) -> Fleet:
        """Reserve the placement group, start every actor in its bundle, and wait until all
        have built their model (one wait, for all of them)."""
        wanted = bundles(spec)
        pg = placement_group(wanted, strategy="PACK")
        ready, _ = ray.wait([pg.ready()], timeout=PLACEMENT_TIMEOUT_S)
        if not ready:
            remove_placement_group(pg)
            raise RuntimeError(
                f"placement group {wanted} was not placed within {PLACEMENT_TIMEOUT_S:.0f} s; "
                f"the cluster has {ray.available_resources()} free. Lower resources.* or "
                "add nodes."
            )
        r = spec.resources
        n_train = r.trainer_actors

        def strategy(i: int) -> PlacementGroupSchedulingStrategy:
            return PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)

        tag = uuid.uuid4().hex[:8]

        def opts(i: int) -> dict[str, Any]:
            b = wanted[i]
            kind = "trainer" if i < n_train else "rollout"
            return {
                "name": f"paddock-{tag}-{kind}-{i if i < n_train else i - n_train}",
                "num_cpus": b["CPU"],
                "num_gpus": b.get("GPU", 0),
                "scheduling_strategy": strategy(i),
                "max_restarts": 0,  # a restart is the run's, from a checkpoint (run.py)
            }

        trainer_cls = ray.remote(TrainerActor)
        rollout_cls = ray.remote(RolloutActor)
        trainers = [
            Member(
                trainer_cls.options(**opts(i)).remote(spec, i, n_train, r.trainer_cpus),
                f"trainer actor {i} of {n_train}",
            )
            for i in range(n_train)
        ]
        rollouts = [
            Member(
                rollout_cls.options(**opts(n_train + i)).remote(spec, r.rollout_cpus),
                f"rollout actor {i} of {r.rollout_replicas}",
            )
            for i in range(r.rollout_replicas)
        ]
        fleet = cls(pg, trainers, rollouts)
        members = trainers + rollouts
        try:
            master = ray.get(trainers[0].handle.rendezvous.remote()) if n_train > 1 else None
            builds = [m.handle.build.remote(master) for m in trainers]
            wheres = ray.get([m.handle.where.remote() for m in members])
            for m, w in zip(members, wheres, strict=True):
                m.where = w
            ray.get(builds)
        except BaseException:
            fleet.stop()
            raise
        return fleet

    def stop(self) -> None:
        """Kill every actor and free the placement group (idempotent)."""
        for m in self.trainers + self.rollouts:
            ray.kill(m.handle, no_restart=True)
        if self.pg is not None:
            remove_placement_group(self.pg)
        self.pg, self.trainers, self.rollouts = None, [], []
