"""Gymnasium-style text environments, run unchanged (`gymnasium.Env`: TextArena-style games,
gymnasium text envs, anything with `reset(seed=…) -> (obs, info)` and
`step(action) -> (obs, reward, terminated, truncated, info)`).

Each episode gets an instance of its own (the entry point's factory, called again with the
spec's `env.args`; a finished episode's instance is reused by the next). `reset(seed=…)`
gives the first prompt (the observation as one user message); each model turn's text is the
action, and the next observation the next user message. The episode's reward is the sum of
the step rewards; `info["success"]` (a bool), when the environment gives it, is its verdict.
Gymnasium's calls block: they run in a thread, bounded by `env.step_timeout_s`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..data.examples import Example
from .base import ModelTurn, Observation, blocking

TRAIN_PLACEHOLDER = Example("", "", {"episode": "train"})


def is_gym_env(obj: Any) -> bool:
    try:
        import gymnasium
    except ImportError:
        return False
    return isinstance(obj, gymnasium.Env)


def _text(obs: Any) -> str:
    if isinstance(obs, str):
        return obs
    if isinstance(obs, dict) and isinstance(obs.get("text"), str):
        return obs["text"]
    return str(obs)


class GymSession:
    def __init__(self, owner: GymEnvironment, env: Any, first: str):
        self.owner, self.env = owner, env
        self.prompt = [{"role": "user", "content": first}]
        self.total = 0.0
        self.done = False

    async def step(self, turn: ModelTurn) -> Observation:
        obs, reward, terminated, truncated, info = await blocking(self.env.step, turn.text)
        self.total += float(reward)
        self.done = bool(terminated or truncated)
        if self.done:
            success = info.get("success") if isinstance(info, dict) else None
            return Observation(
                done=True,
                reward=self.total,
                correct=success if isinstance(success, bool) else None,
                info={"truncated": bool(truncated)},
            )
        return Observation([{"role": "user", "content": _text(obs)}])

    async def close(self) -> None:
        self.owner._free.append(self.env)


class GymEnvironment:
    tools: tuple[dict, ...] = ()  # a game reads the reply's text, not tool calls

    def __init__(self, first: Any, name: str, factory: Callable[[], Any] | None = None):
        self.name = name
        self._factory = factory
        self._free: list[Any] = [first]

    async def start(self, example: Example, seed: int) -> GymSession:
        if self._free:
            env = self._free.pop()
        elif self._factory is not None:
            env = await blocking(self._factory)
        else:
            raise RuntimeError(f"environment {self.name!r}: no factory for a second instance")
        obs, _info = await blocking(env.reset, seed=seed % 2**32)
        return GymSession(self, env, _text(obs))

    def examples(self, eval_size: int) -> tuple[list[Example], list[Example]]:
        """A game's episodes are its seeds: one train placeholder (each group draws its
        own seed) and `eval_size` held-out episodes (seeds 0 … eval_size − 1)."""
        return [TRAIN_PLACEHOLDER], [Example("", "", {"episode": i}) for i in range(eval_size)]

    async def close(self) -> None:
        for env in self._free:
            try:
                env.close()
            except Exception:  # noqa: S110 - closing a finished game: nothing left to lose
                pass
        self._free = []
