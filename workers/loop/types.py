"""What flows through the loop: scored groups, the run's counters, and what the driver trains
through (`TrainerExecutor`: the in-process executor, executor.py; the Ray one,
distributed/proxies.py; a pooled run's, pool/members.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..adapters.update import AdapterUpdate
from ..policy.batch import TrainSample
from ..rollout.base import GroupResult


@dataclass
class ScoredGroup:
    step: int  # the train step this group was drawn for (0-based)
    index: int  # group index within the step
    prompt: str
    answer: str
    result: GroupResult
    rewards: list[float]
    correct: list[bool | None]  # None: the reward has no verifier term to decide it
    generate_s: float = 0.0  # wall time of the rollout batch this group came from
    # per sample: each reward term's unweighted score, and what the terms saw (for the
    # inspector); tuples, so that groups pickled before these fields existed still load
    terms: tuple[dict[str, float], ...] = ()
    details: tuple[dict, ...] = ()
    # per sample, with an environment: the episode's turns and counters (envs/episode.py's
    # episode_record); empty for one-turn samples
    episodes: tuple[dict, ...] = ()

    @property
    def min_version(self) -> int:
        return self.result.min_version


@dataclass
class RunState:
    """Counters that a checkpoint carries; `step` counts completed optimizer steps."""

    step: int = 0
    adapter_version: int = 0
    tokens_total: int = 0
    elapsed_s: float = 0.0  # training wall time, summed over steps (eval excluded)
    dropped_stale_total: int = 0


def draw(seed: int, step: int, group: int, n_examples: int) -> tuple[int, int]:
    """(example index, sampling seed) for one group, a pure function of (seed, step, group):
    no RNG state to save, and sync and async drivers draw the same prompts."""
    rng = random.Random(f"paddock:{seed}:{step}:{group}")  # str seeds hash stably (sha512)
    return rng.randrange(n_examples), rng.getrandbits(62)


class TrainerExecutor(Protocol):
    @property
    def adapter_version(self) -> int: ...

    async def train_step(self, samples: list[TrainSample]) -> dict[str, float]: ...

    async def adapter_update(self, with_probe: bool = True) -> AdapterUpdate:
        """The current adapter as tensors, labelled with its version; with the version
        handshake's probe (a trainer forward) only for engines that check it."""

    async def save(self, out: Path) -> None:
        """The trainer's part of a checkpoint into `out` (loop/checkpoint.py)."""

    async def load(self, src: Path) -> None: ...
