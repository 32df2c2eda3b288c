"""Built-in tasks with verifiable answers, and datasets read from files (see sources.py).

A task is a fixed list of train examples and a disjoint held-out list; the driver picks
prompts from the train list by (seed, step, group), so no RNG state lives here.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

from ..path_guard import PathGuard
from ..spec import DataSpec
from . import sources
from .examples import Example, Task
from .prompts import as_chat, prompt_ids
from .reasoning import reasoning_task
from .reasoning_gym_source import reasoning_gym_task

# Splits are fixed by this seed, not by the run's seed: a held-out prompt stays held out
# across runs and is never seen by the tiny model's warm-up.
_SPLIT_SEED = 20261130


def arithmetic_examples(max_operand: int = 30) -> tuple[list[Example], list[Example]]:
    """`a+b=` → `a+b` for a, b in [0, max_operand). 20% of pairs are held out."""
    pairs = [(a, b) for a in range(max_operand) for b in range(max_operand)]
    random.Random(_SPLIT_SEED).shuffle(pairs)
    examples = [Example(f"{a}+{b}=", str(a + b)) for a, b in pairs]
    cut = len(examples) // 5
    return examples[cut:], examples[:cut]


def reverse_examples(
    n: int = 3000, min_len: int = 3, max_len: int = 5
) -> tuple[list[Example], list[Example]]:
    """`rev abc=` → `cba`: a string task with an exact answer. 20% held out."""
    rng = random.Random(_SPLIT_SEED)
    words: set[str] = set()
    while len(words) < n:
        k = rng.randint(min_len, max_len)
        words.add("".join(rng.choice("abcdefghij") for _ in range(k)))
    ordered = sorted(words)
    rng.shuffle(ordered)
    examples = [Example(f"rev {w}=", w[::-1]) for w in ordered]
    cut = len(examples) // 5
    return examples[cut:], examples[:cut]


def read_examples(
    path: str,
    *,
    fmt: str = "auto",
    split: str = "train",
    prompt_key: str = "prompt",
    answer_key: str = "answer",
    field: str = "path",
    key_fields: tuple[str, str] = ("prompt_key", "answer_key"),
    guard: PathGuard | None = None,
) -> list[Example]:
    """The examples of one source. `field` and `key_fields` are the settings that named it
    and its columns, for the errors; `guard`, the run's roots (under the platform)."""
    local = sources.local_path(path, field, guard)
    fmt = sources.detect_format(local, fmt, field)
    table = sources.read_table(local, fmt, split, field)
    where = local.name if fmt != "save_to_disk" else f"{local.name} ({split})"
    columns = list(table.column_names)
    rows = sources.map_rows(table, columns, where, prompt_key, answer_key, key_fields)
    return [Example(p, a, m) for p, a, m in rows]


def read_jsonl(path: str | Path) -> list[Example]:
    """A JSONL file of {prompt, answer} rows (the layout of `task: jsonl`)."""
    return read_examples(str(path), fmt="jsonl")


def _file_examples(spec: DataSpec, guard: PathGuard | None) -> tuple[list[Example], list[Example]]:
    assert spec.path is not None  # the spec validator guarantees it
    fmt = "jsonl" if spec.task == "jsonl" else spec.format
    train = read_examples(
        spec.path, fmt=fmt, split=spec.split, prompt_key=spec.prompt_key,
        answer_key=spec.answer_key, guard=guard,
    )  # fmt: skip
    if spec.eval_path or spec.eval_split:
        held = read_examples(
            spec.eval_path or spec.path, fmt=fmt, split=spec.eval_split or spec.split,
            prompt_key=spec.eval_prompt_key or spec.prompt_key,
            answer_key=spec.eval_answer_key or spec.answer_key, field="eval_path",
            key_fields=(
                "eval_prompt_key" if spec.eval_prompt_key else "prompt_key",
                "eval_answer_key" if spec.eval_answer_key else "answer_key",
            ), guard=guard,
        )  # fmt: skip
    else:  # no eval data: hold out the last 10%
        cut = max(1, len(train) // 10)
        if len(train) < 2:
            raise ValueError(
                f"data.path: {spec.path} has one row; holding out 10% for eval needs two "
                "(or set data.eval_path)"
            )
        train, held = train[:-cut], train[-cut:]
    return train, held


def _within_limit(
    examples: list[Example], spec: DataSpec, tokenizer: Any, split: str
) -> tuple[list[Example], int]:
    """The examples whose prompt fits in `max_prompt_tokens`, and how many did not."""
    limit = spec.max_prompt_tokens
    if limit is None:
        return examples, 0
    kept = []
    for i, ex in enumerate(examples):
        n = len(prompt_ids(tokenizer, ex.prompt, spec.chat_template_kwargs))
        if n <= limit:
            kept.append(ex)
        elif spec.overlong_prompts == "error":
            raise ValueError(
                f"data.max_prompt_tokens: prompt {i} of the {split} split has {n} tokens, over "
                f"{limit} (data.overlong_prompts: drop skips such prompts)"
            )
    if not kept:
        raise ValueError(
            f"data.max_prompt_tokens: every prompt of the {split} split has more than "
            f"{limit} tokens"
        )
    return kept, len(examples) - len(kept)


def load_task(
    spec: DataSpec,
    tokenizer: Any = None,
    own: tuple[str, list[Example], list[Example]] | None = None,
    guard: PathGuard | None = None,
) -> Task:
    """The task of the data section: its source read, prompts put in chat form as the spec
    asks, and, with `tokenizer`, prompts over `max_prompt_tokens` dropped (or refused) and
    message prompts checked against the tokenizer's chat template. `own`: the (name, train,
    held-out) examples of `task: environment`, which the environment makes. `guard`: the
    run's roots (under the platform), which its files must lie in."""
    if spec.task == "environment" and own is None:
        raise ValueError("data.task: environment: the environment made no examples")
    task = Task(*own) if own is not None else _source_task(spec, guard)
    builtin = spec.task not in ("dataset", "jsonl", "reasoning_gym")

    def prepared(ex: Example) -> Example:
        chat = as_chat(
            ex.prompt, system_prompt=spec.system_prompt, chat_template=spec.chat_template
        )
        metadata = {"data_source": task.name} if builtin and not ex.metadata else ex.metadata
        return dataclasses.replace(ex, prompt=chat, metadata=metadata)

    train, held = [prepared(ex) for ex in task.train], [prepared(ex) for ex in task.eval]
    dropped = {}
    if tokenizer is not None:
        # a missing chat template, or template arguments it cannot take, fail here and not
        # at the first step that draws a chat prompt
        chats = [ex.prompt for ex in train + held if isinstance(ex.prompt, list)]
        if chats:
            prompt_ids(tokenizer, chats[0], spec.chat_template_kwargs)
        train, dropped["train"] = _within_limit(train, spec, tokenizer, "train")
        held, dropped["eval"] = _within_limit(held, spec, tokenizer, "eval")
    elif spec.max_prompt_tokens is not None:
        raise ValueError("data.max_prompt_tokens: checking prompt lengths needs the tokenizer")
    return dataclasses.replace(
        task,
        train=train,
        eval=held[: spec.eval_size],
        template_kwargs=dict(spec.chat_template_kwargs),
        dropped=dropped,
    )


def _source_task(spec: DataSpec, guard: PathGuard | None = None) -> Task:
    if spec.task == "reasoning_gym":
        return reasoning_gym_task(spec)
    if spec.task == "reasoning":
        return reasoning_task(spec.eval_size)
    if spec.task == "arithmetic":
        train, held = arithmetic_examples()
    elif spec.task == "reverse":
        train, held = reverse_examples()
    else:
        train, held = _file_examples(spec, guard)
    return Task(spec.task, train, held)
