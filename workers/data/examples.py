"""What a task is made of: examples (a prompt, its answer, a row's other columns) in a train
list and a disjoint held-out list. Every source of examples (tasks.py's built-ins and
files, reasoning.py, reasoning_gym_source.py, an environment's own) makes these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .prompts import Prompt


@dataclass(frozen=True)
class Example:
    prompt: Prompt  # a string, or chat messages [{role, content}] (see prompts.py)
    answer: str
    # what rewards get besides the answer: a dataset row's other columns (data_source,
    # extra_info, ...), as JSON values
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    name: str
    train: list[Example]
    eval: list[Example]
    template_kwargs: dict[str, Any] = field(default_factory=dict)  # data.chat_template_kwargs
    dropped: dict[str, int] = field(default_factory=dict)  # split -> prompts over the limit

    def is_correct(self, completion: str, answer: str) -> bool:
        """Accuracy is strict: the completion (up to EOS, stripped) *is* the answer."""
        return completion.strip() == answer
