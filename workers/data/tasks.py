"""Built-in tasks with verifiable answers, and JSONL datasets of {prompt, answer}.

A task is a fixed list of train examples and a disjoint held-out list; the driver picks
prompts from the train list by (seed, step, group), so no RNG state lives here.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from ..spec import DataSpec


@dataclass(frozen=True)
class Example:
    prompt: str
    answer: str


@dataclass(frozen=True)
class Task:
    name: str
    train: list[Example]
    eval: list[Example]

    def is_correct(self, completion: str, answer: str) -> bool:
        """Accuracy is strict: the completion (up to EOS, stripped) *is* the answer."""
        return completion.strip() == answer


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


def read_jsonl(path: str | Path) -> list[Example]:
    out: list[Example] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if not isinstance(row, dict) or "prompt" not in row or "answer" not in row:
                raise ValueError(
                    f"{path}:{lineno}: each line must be an object with prompt and answer"
                )
            out.append(Example(str(row["prompt"]), str(row["answer"])))
    if not out:
        raise ValueError(f"{path}: no examples")
    return out


def load_task(spec: DataSpec) -> Task:
    if spec.task == "arithmetic":
        train, held = arithmetic_examples()
    elif spec.task == "reverse":
        train, held = reverse_examples()
    else:
        assert spec.path is not None  # the spec validator guarantees it
        train = read_jsonl(spec.path)
        if spec.eval_path:
            held = read_jsonl(spec.eval_path)
        else:  # no eval file: hold out the last 10%
            cut = max(1, len(train) // 10)
            train, held = train[:-cut], train[-cut:]
    return Task(spec.task, train, held[: spec.eval_size])
