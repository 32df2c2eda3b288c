"""The built-in tool-use environment: long sums with a calculator tool.

    user:      Add 48+39+12.
    assistant: <tool_call>{"name": "add", "arguments": {"a": 48, "b": 39}}</tool_call>
    tool:      87
    assistant: <tool_call>{"name": "add", "arguments": {"a": 87, "b": 12}}</tool_call>
    tool:      99
    assistant: \\boxed{99}

Two or three terms of two digits: too long for the local chat model to add in its
head, easy with the tool. The episode ends at the first reply without a tool call; the
reward is the spec's (boxed_match on that reply). The local chat model's warm-up
(`model.tiny.task: calculator`) learns the format from `worked_episode`, with a share of
replies that skip the tool and guess, unboxed (`guess=True`): the base then mostly guesses
when greedy, and RL has the tool use to find and reinforce.
"""

from __future__ import annotations

import json
import random
import re
import zlib

from ..data.examples import Example
from .base import Message, ModelTurn, Observation, Toolbox

MIN_TERMS, MAX_TERMS = 2, 3
_SPLIT_SEED = 20261204  # fixed: a held-out prompt stays held out across runs and warm-ups

ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


def _add(a: int, b: int) -> int:
    if (
        isinstance(a, bool)
        or isinstance(b, bool)
        or not isinstance(a, int)
        or not isinstance(b, int)
    ):
        raise TypeError("add takes two integers")
    return a + b


def question(terms: list[int]) -> str:
    return "Add " + "+".join(map(str, terms)) + "."


def terms_of(ex: Example) -> list[int]:
    text = ex.prompt[-1]["content"] if isinstance(ex.prompt, list) else ex.prompt
    return [int(t) for t in re.findall(r"\d+", text)]


def call_text(a: int, b: int) -> str:
    return (
        "<tool_call>" + json.dumps({"name": "add", "arguments": {"a": a, "b": b}}) + "</tool_call>"
    )


def worked_episode(
    ex: Example, guess: bool = False, rng: random.Random | None = None
) -> list[Message]:
    """The example's conversation after its prompt, as the warm-up teaches it: one `add`
    call a term, then the boxed total. `guess`: no tool, an unboxed guess that is off."""
    terms = terms_of(ex)
    if guess:  # no tool, and no box: the guess never scores, nor teaches the box
        rng = rng or random.Random(0)
        off = rng.choice([-1, 1]) * rng.randint(1, 20)
        return [{"role": "assistant", "content": f"About {sum(terms) + off}."}]
    out: list[Message] = []
    total = terms[0]
    for t in terms[1:]:
        out.append({"role": "assistant", "content": call_text(total, t)})
        total += t
        out.append({"role": "tool", "name": "add", "content": str(total)})
    out.append({"role": "assistant", "content": f"\\boxed{{{total}}}"})
    return out


def held_out(terms: tuple[int, ...]) -> bool:
    return zlib.crc32(question(list(terms)).encode()) % 5 == 0


def long_sum_examples(n: int = 20000, n_eval: int = 1000) -> tuple[list[Example], list[Example]]:
    rng = random.Random(_SPLIT_SEED)
    train: list[Example] = []
    held: list[Example] = []
    while len(train) < n or len(held) < n_eval:
        k = rng.randint(MIN_TERMS, MAX_TERMS)
        terms = tuple(rng.randint(10, 99) for _ in range(k))
        split, cap = (held, n_eval) if held_out(terms) else (train, n)
        if len(split) < cap:
            split.append(
                Example([{"role": "user", "content": question(list(terms))}], str(sum(terms)))
            )
    return train, held


class CalculatorSession:
    def __init__(self, example: Example, toolbox: Toolbox):
        self.prompt = example.prompt
        self.toolbox = toolbox

    async def step(self, turn: ModelTurn) -> Observation:
        if not turn.calls:
            return Observation(done=True)  # the answer: the spec's reward terms score it
        return await self.toolbox.answer(turn.calls)

    async def close(self) -> None:
        pass


class Calculator:
    """`env.name: calculator`: an `add` tool; the data are `long_sum_examples`."""

    name = "calculator"

    def __init__(self) -> None:
        self.toolbox = Toolbox({"add": (ADD_TOOL, _add)})
        self.tools = self.toolbox.schemas

    async def start(self, example: Example, seed: int) -> CalculatorSession:
        return CalculatorSession(example, self.toolbox)

    def examples(self, eval_size: int) -> tuple[list[Example], list[Example]]:
        train, held = long_sum_examples()
        return train, held[:eval_size]

    async def close(self) -> None:
        pass
