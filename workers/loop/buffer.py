"""The trajectory buffer between rollout and trainer, with staleness control.

Groups are filed under the train step they were drawn for; the trainer takes a step's groups
in order. A group is trained on only if `trainer_version − its oldest token's version ≤
max_staleness`; older ones are dropped and counted.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..rollout.base import GroupRequest
from .types import ScoredGroup


class TrajectoryBuffer:
    def __init__(self, capacity_groups: int):
        if capacity_groups <= 0:
            raise ValueError(f"buffer capacity must be > 0 groups, got {capacity_groups}")
        self.capacity = capacity_groups
        self._steps: dict[int, list[ScoredGroup]] = {}
        # Partial groups cut short by a pause, to resubmit on resume: step → requests.
        self.pending: dict[int, list[GroupRequest]] = {}
        self._cond = asyncio.Condition()

    def __len__(self) -> int:
        return sum(len(g) for g in self._steps.values())

    def steps(self) -> list[int]:
        return sorted(self._steps)

    async def put(self, step: int, groups: list[ScoredGroup]) -> None:
        async with self._cond:
            # A step's groups go in together, so "full" means no room for a whole step;
            # one step always fits, or a small capacity would deadlock.
            await self._cond.wait_for(
                lambda: len(self) == 0 or len(self) + len(groups) <= self.capacity
            )
            self._steps[step] = groups
            self._cond.notify_all()

    async def take(self, step: int) -> list[ScoredGroup]:
        async with self._cond:
            await self._cond.wait_for(lambda: step in self._steps)
            groups = self._steps.pop(step)
            self._cond.notify_all()
            return groups

    @staticmethod
    def filter_stale(
        groups: list[ScoredGroup], trainer_version: int, max_staleness: int
    ) -> tuple[list[ScoredGroup], list[ScoredGroup]]:
        fresh = [g for g in groups if trainer_version - g.min_version <= max_staleness]
        stale = [g for g in groups if trainer_version - g.min_version > max_staleness]
        return fresh, stale

    # ---------------------------------------------------------------- checkpoint

    def state_dict(self) -> dict[str, Any]:
        return {"steps": dict(self._steps), "pending": dict(self.pending)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._steps = dict(state["steps"])
        self.pending = dict(state["pending"])
