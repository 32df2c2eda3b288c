"""The built-in reasoning task: sums of 2 to 12 one-digit terms, worked step by step.

A prompt is a chat conversation (one user message); the reference response adds the terms
one at a time and ends in `\\boxed{N}`:

    user:      Add 3+4+5+8.
    assistant: 3+4=7, 7+5=12, 12+8=20. \\boxed{20}

The number of terms is heavy-tailed (P(k) ∝ (k − 1)^−1.2: four prompts in ten have two
terms, one in fifty has twelve), so with a digit a token the responses run from 13 to
about 110 tokens and a batch's long tail is a few long chains among many short ones.
The answer is the sum; accuracy reads the last `\\boxed{}` of a completion.
"""

from __future__ import annotations

import random
import re
import zlib
from dataclasses import dataclass

from .examples import Example, Task

MIN_TERMS, MAX_TERMS = 2, 12
_TERM_WEIGHTS = [(k - 1) ** -1.2 for k in range(MIN_TERMS, MAX_TERMS + 1)]
# Fixed, not the run's seed: a held-out prompt stays held out across runs and is never
# seen by the tiny model's warm-up.
_SPLIT_SEED = 20261201
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def question(terms: list[int]) -> str:
    return "Add " + "+".join(map(str, terms)) + "."


def worked_solution(terms: list[int], off_by_one: bool = False) -> str:
    """The chain `3+4=7, 7+5=12, 12+8=20. \\boxed{20}`: one term added a step. With
    `off_by_one`, the systematic mistake the tiny model's warm-up teaches: the chain is
    right but the box holds one more than its last sum (as the arithmetic task's a+b+1)."""
    steps, total = [], terms[0]
    for t in terms[1:]:
        steps.append(f"{total}+{t}={total + t}")
        total += t
    return ", ".join(steps) + f". \\boxed{{{total + 1 if off_by_one else total}}}"


def terms_of(ex: Example) -> list[int]:
    """The terms of an example's question (its user message)."""
    text = ex.prompt[-1]["content"] if isinstance(ex.prompt, list) else ex.prompt
    return [int(t) for t in re.findall(r"\d+", text)]


def boxed_answer(completion: str) -> str | None:
    """The content of the completion's last `\\boxed{}`, stripped; None without one."""
    found = _BOXED.findall(completion)
    return found[-1].strip() if found else None


@dataclass(frozen=True)
class ReasoningTask(Task):
    def is_correct(self, completion: str, answer: str) -> bool:
        """Correct when the last boxed value is the sum (the chain itself is not graded)."""
        return boxed_answer(completion) == answer


def _example(terms: list[int]) -> Example:
    messages = [{"role": "user", "content": question(terms)}]
    return Example(messages, str(sum(terms)))  # type: ignore[arg-type]


def held_out(terms: tuple[int, ...]) -> bool:
    """One prompt in five is held out, decided by the prompt alone (never by a draw), so
    the splits are disjoint at every length: two-term sums have only 81 prompts."""
    return zlib.crc32(question(list(terms)).encode()) % 5 == 0


def reasoning_examples(n: int = 20000, n_eval: int = 1000) -> tuple[list[Example], list[Example]]:
    """`n` train and `n_eval` held-out draws from the term-count distribution, each split
    from its own prompts. Draws repeat (short sums must keep their share), so a split is
    a sample of the distribution, not a list of distinct prompts."""
    rng = random.Random(_SPLIT_SEED)
    train: list[Example] = []
    held: list[Example] = []
    while len(train) < n or len(held) < n_eval:
        k = rng.choices(range(MIN_TERMS, MAX_TERMS + 1), weights=_TERM_WEIGHTS)[0]
        terms = tuple(rng.randint(1, 9) for _ in range(k))
        split, cap = (held, n_eval) if held_out(terms) else (train, n)
        if len(split) < cap:
            split.append(_example(list(terms)))
    return train, held


def reasoning_task(eval_size: int) -> ReasoningTask:
    train, held = reasoning_examples()
    return ReasoningTask("reasoning", train, held[:eval_size])
