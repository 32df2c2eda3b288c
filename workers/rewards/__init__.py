"""Reward functions, registered by name. A config can only *name* one of these: nothing in a
spec makes a worker import or evaluate code."""

from __future__ import annotations

import re
from collections.abc import Callable

from ..grpo.registry import Registry
from ..spec import RewardSpec

RewardFn = Callable[[str, str, "str | None"], float]
REWARDS: Registry[RewardFn] = Registry("reward")

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@REWARDS.register("exact_match")
def exact_match(completion: str, answer: str, pattern: str | None = None) -> float:
    return float(completion.strip() == answer.strip())


@REWARDS.register("numeric_match")
def numeric_match(completion: str, answer: str, pattern: str | None = None) -> float:
    """1.0 when the first number in the completion equals the answer numerically."""
    found = _NUMBER.search(completion)
    if found is None:
        return 0.0
    try:
        return float(abs(float(found.group()) - float(answer)) < 1e-9)
    except ValueError:
        return 0.0


@REWARDS.register("format_regex")
def format_regex(completion: str, answer: str, pattern: str | None = None) -> float:
    if pattern is None:
        raise ValueError("format_regex needs a pattern")
    return float(re.fullmatch(pattern, completion.strip()) is not None)


def make_reward(spec: RewardSpec) -> Callable[[str, str], float]:
    """The weighted sum of the spec's reward terms, as one function of (completion, answer)."""
    terms = [(REWARDS.get(t.name), t.weight, t.pattern) for t in spec.functions]

    def reward(completion: str, answer: str) -> float:
        return sum(w * fn(completion, answer, p) for fn, w, p in terms)

    return reward


__all__ = ["REWARDS", "exact_match", "format_regex", "make_reward", "numeric_match"]
