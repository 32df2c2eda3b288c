"""reasoning-gym generators as a data source (`data.task: reasoning_gym`).

Each example is the generator's question as one user message (after reasoning-gym's own
`default` system prompt, which asks for `<answer>…</answer>`, unless `data.system_prompt`
says otherwise), its answer, and the whole generated entry in the metadata, which the
`reasoning_gym` reward term hands back to the generator's own `score_answer`. The train and
held-out examples come from two seeds (`seed`, `seed + 1`): generated, not split.
"""

from __future__ import annotations

import json
from typing import Any

from ..spec import DataSpec
from .examples import Example, Task


def _json(value: Any) -> Any:
    """The entry as JSON values (reasoning-gym's metadata holds tuples)."""
    return json.loads(json.dumps(value, default=str))


def reasoning_gym_task(spec: DataSpec) -> Task:
    import reasoning_gym
    from reasoning_gym.utils import SYSTEM_PROMPTS

    rg = spec.reasoning_gym
    assert rg is not None  # the spec's validator requires it
    system = spec.system_prompt if spec.system_prompt is not None else SYSTEM_PROMPTS["default"]

    def examples(size: int, seed: int) -> list[Example]:
        try:
            data = reasoning_gym.create_dataset(rg.dataset, size=size, seed=seed, **rg.config)
        except (ValueError, TypeError) as exc:  # an unknown generator or setting
            raise ValueError(f"data.reasoning_gym: {exc}") from None
        out = []
        for entry in data:
            prompt = [
                {"role": "system", "content": system},
                {"role": "user", "content": entry["question"]},
            ]
            out.append(Example(prompt, str(entry["answer"]), {"reasoning_gym": _json(entry)}))
        return out

    return Task(
        f"reasoning_gym:{rg.dataset}",
        examples(rg.size, rg.seed),
        examples(rg.eval_size, rg.seed + 1),
    )
