"""What scoring takes and gives: one item per sample, one score per (term, sample), and the
weighted sum with its parts."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

T = TypeVar("T")

# verifier: checks the answer, so it decides accuracy; shaping: a bonus or penalty on the
# form (format, length), which never makes a sample correct or wrong.
Role = Literal["verifier", "shaping"]


@dataclass(frozen=True)
class ScoreItem:
    prompt: Any  # a string, or the chat messages the prompt was built from
    completion: str
    answer: str
    metadata: dict[str, Any] = field(default_factory=dict)
    completion_tokens: int = 0
    max_new_tokens: int = 0
    # a multi-turn episode's own reward and verdict from its environment (the `env` term)
    env_reward: float | None = None
    env_correct: bool | None = None


@dataclass(frozen=True)
class TermScore:
    score: float  # unweighted
    correct: bool | None = None  # None for shaping terms
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SampleScore:
    reward: float  # Σ weight · score
    terms: dict[str, float]  # term key → unweighted score
    details: dict[str, dict[str, Any]]  # term key → what the term saw (for the inspector)
    correct: bool | None  # every verifier term correct; None when the spec has none


class TermScorer(Protocol):
    """One term of a reward spec, scoring a whole batch at once."""

    role: Role

    async def score(self, items: list[ScoreItem]) -> list[TermScore]: ...

    async def close(self) -> None: ...


class RewardError(RuntimeError):
    """Scoring failed: the step cannot go on with a made-up reward."""


async def run_all(coros: list[Coroutine[Any, Any, T]]) -> list[T]:
    """The results of `coros`, run concurrently; the first failure cancels the others and is
    raised as itself (not inside an ExceptionGroup), so the step's error names it plainly."""
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(c) for c in coros]
    except BaseExceptionGroup as group:
        exc: BaseException = group
        while isinstance(exc, BaseExceptionGroup):
            exc = exc.exceptions[0]
        raise exc from None
    return [t.result() for t in tasks]
