"""eval/accuracy: greedy decoding on the held-out split, through the rollout backend (so it
scores the adapter the engine actually serves)."""

from __future__ import annotations

import dataclasses

from ..data import prompt_ids
from ..rollout.base import GroupRequest
from .producer import RolloutContext
from .scoring import accuracy, eval_correct


async def evaluate(ctx: RolloutContext) -> float:
    params = dataclasses.replace(ctx.params, greedy=True)
    examples = ctx.task.eval
    requests = [
        GroupRequest(
            f"eval-{i}",
            prompt_ids(ctx.tokenizer, ex.prompt, ctx.task.template_kwargs),
            1,
            0,
            params,
        )
        for i, ex in enumerate(examples)
    ]
    results = await ctx.backend.generate(requests)
    # strict equality on the answer-only built-in tasks, else the reward's verifier terms;
    # NaN (left out of the metrics) when the reward has none
    correct = await eval_correct(ctx, examples, [r.samples[0] for r in results])
    return accuracy(correct) if examples else 0.0
