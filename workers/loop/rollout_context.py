"""What the rollout side of a run works with: the task, the engine, the scorer, the sampling
settings, and with an environment its renderer and limits. The producer, the scoring and
the evaluation all read one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..data.examples import Task
from ..envs import ChatRenderer, Environment, EpisodeLimits, EpisodeRunner
from ..rewards import Scorer
from ..rollout.base import RolloutBackend, SamplingParams


@dataclass
class RolloutContext:
    task: Task
    tokenizer: object
    backend: RolloutBackend
    scorer: Scorer  # the reward spec's terms; scores a step's samples as one batch
    params: SamplingParams
    seed: int
    prompts_per_step: int
    group_size: int
    # accuracy: the task's strict equality (True) or the reward's verifier terms (False)
    strict_accuracy: bool = False
    # the prompt's chat template with the environment's tools; its answers' tokens
    renderer: ChatRenderer | None = None
    env: Environment | None = None  # None: one turn a sample
    limits: EpisodeLimits = EpisodeLimits()
    tool_format: str = "hermes"

    def chat(self) -> ChatRenderer:
        if self.renderer is None:  # a context built by hand (tests): the task's template
            self.renderer = ChatRenderer(
                self.tokenizer, (), template_kwargs=self.task.template_kwargs
            )
        return self.renderer

    def runner(self, stopping: Callable[[], bool] = lambda: False) -> EpisodeRunner:
        return EpisodeRunner(
            self.backend, self.chat(), self.env, self.limits, self.tool_format, stopping
        )  # type: ignore[arg-type]
