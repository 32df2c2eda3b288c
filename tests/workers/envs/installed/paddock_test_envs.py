"""Environments written for other frameworks, as a package would ship them: a Gymnasium text
game and a verifiers taskset, declared to Paddock by the entry points of this directory's
dist-info (tests put the directory on sys.path, as pip would install it)."""

from __future__ import annotations

import random

import gymnasium
import verifiers.v1 as vf
from pydantic_config import BaseConfig


class GuessDigit(gymnasium.Env):
    """Guess a digit in three tries; reward 1 for a right guess. Plain Gymnasium."""

    metadata: dict = {"render_modes": []}

    def __init__(self, tries: int = 3):
        self.tries = tries
        self.action_space = gymnasium.spaces.Text(max_length=512)
        self.observation_space = gymnasium.spaces.Text(max_length=512)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target = random.Random(seed).randrange(10)
        self.left = self.tries
        return f"Guess my digit (0-9). You have {self.tries} tries.", {}

    def step(self, action: str):
        self.left -= 1
        if str(self.target) in action:
            return "Right.", 1.0, True, False, {"success": True}
        if self.left == 0:
            return "Out of tries.", 0.0, True, False, {"success": False}
        hint = "higher" if any(d.isdigit() and int(d) < self.target for d in action) else "lower"
        return f"No. Try {hint}. {self.left} left.", 0.0, False, False, {}


class CalcConfig(BaseConfig):
    pass


class Calc(vf.Toolset[CalcConfig]):
    TOOL_PREFIX = None  # bare tool names: `add`

    @vf.tool
    def add(self, a: int, b: int) -> int:
        """Add two integers."""
        return a + b


class SumData(vf.TaskData):
    answer: int


class SumTask(vf.Task[SumData, vf.State, vf.TaskConfig]):
    @classmethod
    def toolsets(cls, config):
        return [Calc(CalcConfig())]

    @vf.reward
    async def correct(self, trace) -> float:
        return float(vf.extract_boxed_answer(trace.last_reply) == str(self.data.answer))


class SumTaskset(vf.Taskset[SumTask, vf.TasksetConfig]):
    def load(self):
        rng = random.Random(0)
        for _ in range(60):
            terms = [rng.randint(10, 99) for _ in range(rng.randint(2, 3))]
            yield SumTask(
                SumData(prompt="Add " + "+".join(map(str, terms)) + ".", answer=sum(terms))
            )


def sums(**_):
    return SumTaskset(vf.TasksetConfig(id="paddock-test-sums"))
