"""Scoring in the loop: a step's groups (or the eval answers) go to the reward scorer as one
batch. `accuracy` is the task's own strict check on the built-in answer-only tasks, and
otherwise comes from the reward's verifier terms (docs/config-reference.md#reward)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..envs import EpisodeState, GroupEpisodes
from ..rewards import ScoreItem
from ..rollout.base import Sample
from .rollout_context import RolloutContext

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


def score_item(
    ex: Any, sample: Sample, max_new_tokens: int, episode: EpisodeState | None = None
) -> ScoreItem:
    """What the reward terms see of a sample: its text (an episode's last model reply),
    its model tokens, and an episode's own reward and verdict from its environment."""
    return ScoreItem(
        prompt=ex.prompt,
        completion=sample.text,
        answer=ex.answer,
        metadata=dict(getattr(ex, "metadata", None) or {}),
        completion_tokens=sample.model_tokens,
        max_new_tokens=max_new_tokens,
        env_reward=episode.reward if episode is not None else None,
        env_correct=episode.correct if episode is not None else None,
    )


async def score_groups(
    ctx: RolloutContext, examples: Sequence[Any], groups: Sequence[GroupEpisodes]
) -> list[GroupScores]:
    """One scorer call for all the samples of all the groups."""
    limit = ctx.params.max_new_tokens
    items = [score_item(ex, s, limit, st)
             for ex, g in zip(examples, groups, strict=True)
             for s, st in zip(g.result.samples, g.states, strict=True)]  # fmt: skip
    scores = iter(await ctx.scorer.score(items))
    out = []
    for ex, res in zip(examples, (g.result for g in groups), strict=True):
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
    ctx: RolloutContext, examples: Sequence[Any], groups: Sequence[GroupEpisodes]
) -> list[bool | None]:
    """Correctness of one greedy episode per held-out example."""
    samples = [g.result.samples[0] for g in groups]
    if ctx.strict_accuracy:
        return [ctx.task.is_correct(s.text, ex.answer)
                for s, ex in zip(samples, examples, strict=True)]  # fmt: skip
    limit = ctx.params.max_new_tokens
    items = [score_item(ex, s, limit, g.states[0])
             for s, ex, g in zip(samples, examples, groups, strict=True)]  # fmt: skip
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
