"""Scoring in the loop: a step's groups (or the eval answers) go to the reward scorer as one
batch. `accuracy` is the task's own strict check on the built-in answer-only tasks, and
otherwise comes from the reward's verifier terms (docs/config-reference.md#reward)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..rewards import ScoreItem
from ..rollout.base import GroupResult, Sample

if TYPE_CHECKING:
    from .producer import RolloutContext

# Tasks whose completion *is* the answer: accuracy stays exact equality there, whatever the
# reward. Any other task (a dataset, the reasoning chains) is correct by its reward's
# verifier terms.
STRICT_ACCURACY_TASKS = frozenset({"arithmetic", "reverse"})


@dataclass
class GroupScores:
    rewards: list[float]
    correct: list[bool | None]
    terms: tuple[dict[str, float], ...]
    details: tuple[dict[str, Any], ...]


def score_item(ex: Any, sample: Sample, max_new_tokens: int) -> ScoreItem:
    return ScoreItem(
        prompt=ex.prompt,
        completion=sample.text,
        answer=ex.answer,
        metadata=dict(getattr(ex, "metadata", None) or {}),
        completion_tokens=len(sample.token_ids),
        max_new_tokens=max_new_tokens,
    )


async def score_groups(
    ctx: RolloutContext, examples: Sequence[Any], results: Sequence[GroupResult]
) -> list[GroupScores]:
    """One scorer call for all the samples of all the groups."""
    limit = ctx.params.max_new_tokens
    items = [score_item(ex, s, limit) for ex, res in zip(examples, results, strict=True)
             for s in res.samples]  # fmt: skip
    scores = iter(await ctx.scorer.score(items))
    out = []
    for ex, res in zip(examples, results, strict=True):
        got = [next(scores) for _ in res.samples]
        if ctx.strict_accuracy:
            correct = [ctx.task.is_correct(s.text, ex.answer) for s in res.samples]
        else:
            correct = [g.correct for g in got]
        out.append(
            GroupScores(
                rewards=[g.reward for g in got],
                correct=correct,
                terms=tuple(g.terms for g in got),
                details=tuple(g.details for g in got),
            )
        )
    return out


async def eval_correct(
    ctx: RolloutContext, examples: Sequence[Any], samples: Sequence[Sample]
) -> list[bool | None]:
    """Correctness of one greedy answer per held-out example."""
    if ctx.strict_accuracy:
        return [ctx.task.is_correct(s.text, ex.answer)
                for s, ex in zip(samples, examples, strict=True)]  # fmt: skip
    limit = ctx.params.max_new_tokens
    items = [score_item(ex, s, limit) for s, ex in zip(samples, examples, strict=True)]
    return await ctx.scorer.correct(items)


def accuracy(correct: Sequence[bool | None]) -> float:
    """The share of correct samples among those that have a verdict; NaN (left out of the
    metrics) when none has, i.e. the reward has no verifier term."""
    judged = [c for c in correct if c is not None]
    return sum(judged) / len(judged) if judged else float("nan")


def term_metrics(groups: Sequence[Any]) -> dict[str, float]:
    """`reward/<term>/mean` over the samples of `groups` (ScoredGroups), each term's
    unweighted score."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for g in groups:
        for terms in g.terms:
            for key, score in terms.items():
                sums[key] = sums.get(key, 0.0) + score
                counts[key] = counts.get(key, 0) + 1
    return {f"reward/{k}/mean": sums[k] / counts[k] for k in sums}
