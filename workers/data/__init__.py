"""Tasks and datasets: built-in synthetic tasks, and JSONL, Parquet and `save_to_disk`
datasets with their columns mapped by the spec's data section; prompts.py turns a prompt
into the token ids every engine gets."""

from .examples import Example, Task
from .prompts import Prompt, prompt_ids, prompt_text
from .tasks import (
    arithmetic_examples,
    load_task,
    read_examples,
    read_jsonl,
    reverse_examples,
)

__all__ = [
    "Example",
    "Prompt",
    "Task",
    "arithmetic_examples",
    "load_task",
    "prompt_ids",
    "prompt_text",
    "read_examples",
    "read_jsonl",
    "reverse_examples",
]
