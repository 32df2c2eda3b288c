"""eval/accuracy: greedy episodes on the held-out split, through the rollout backend (so it
scores the adapter the engine actually serves), one turn each without an environment."""

from __future__ import annotations

import asyncio
import dataclasses

from ..envs import GroupProgress
from .rollout_context import RolloutContext
from .scoring import accuracy, eval_correct


async def evaluate(ctx: RolloutContext) -> float:
    params = dataclasses.replace(ctx.params, greedy=True)
    examples = ctx.task.eval
    runner = ctx.runner()
    # the environment's seed of episode i is i: a held-out episode is the same at each eval
    groups = await asyncio.gather(
        *(
            runner.run_group(GroupProgress(f"eval-{i}", 1, i, params), ex)
            for i, ex in enumerate(examples)
        )
    )
    # strict equality on the answer-only built-in tasks, else the reward's verifier terms;
    # NaN (left out of the metrics) when the reward has none
    correct = await eval_correct(ctx, examples, groups)  # type: ignore[arg-type]
    return accuracy(correct) if examples else 0.0
