"""The executor of one rank of a sharded policy (no Ray here: the Ray trainer actors and the
torchrun launcher both use it)."""

from __future__ import annotations

from pathlib import Path

import torch

from ..loop.executor import LocalExecutor, _rng_state
from ..policy import LoraPolicy


class RankExecutor(LocalExecutor):
    """LocalExecutor for one rank of a sharded policy: every rank takes part in the gathers,
    rank 0 alone writes the files."""

    def __init__(self, policy: LoraPolicy, rank: int):
        super().__init__(policy)
        self.rank = rank

    async def save(self, out: Path) -> None:
        self.policy.save_adapter(out / "adapter")
        optimizer = self.policy.optimizer_state()
        if self.rank == 0:
            torch.save(optimizer, out / "optimizer.pt")
            torch.save(_rng_state(), out / "rng.pt")
