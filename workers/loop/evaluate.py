"""eval/accuracy: greedy decoding on the held-out split, through the rollout backend (so it
scores the adapter the engine actually serves)."""

from __future__ import annotations

import dataclasses

from ..data import prompt_ids
from ..rollout.base import GroupRequest
from .producer import RolloutContext


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
    correct = sum(
        ctx.task.is_correct(r.samples[0].text, ex.answer)
        for r, ex in zip(results, examples, strict=True)
    )
    return correct / max(len(examples), 1)
