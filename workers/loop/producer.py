"""The rollout side of the loop: draws a step's prompts, generates groups, scores them, and
files them in the buffer. The sync driver calls `produce(step)` inline; the async driver runs
`run()` as a task that stays at most `lookahead` steps ahead of the trainer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..data import Task, prompt_ids, prompt_text
from ..rewards import Scorer
from ..rollout.base import GroupRequest, GroupResult, RolloutBackend, SamplingParams
from .buffer import TrajectoryBuffer
from .control import ControlSource
from .scoring import score_groups
from .types import ScoredGroup, draw


class StepWatch:
    """How many train steps the trainer has completed *and published*: the rollout side may
    start drawing for step s once s − lookahead steps are published."""

    def __init__(self, published: int = 0):
        self.published = published
        self._cond = asyncio.Condition()

    async def set(self, published: int) -> None:
        async with self._cond:
            self.published = published
            self._cond.notify_all()

    async def wait_for(self, target: int, stop: Callable[[], bool]) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self.published >= target or stop())

    async def poke(self) -> None:
        async with self._cond:
            self._cond.notify_all()


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


class Producer:
    def __init__(
        self,
        ctx: RolloutContext,
        buffer: TrajectoryBuffer,
        watch: StepWatch,
        control: ControlSource,
        lookahead: int,
    ):
        self.ctx, self.buffer, self.watch, self.control = ctx, buffer, watch, control
        self.lookahead = lookahead
        self.stopping = False
        self._produced: dict[int, asyncio.Event] = {}
        self.task: asyncio.Task | None = None

    # ---------------------------------------------------------------- requests

    def requests_for(self, step: int) -> list[GroupRequest]:
        ctx = self.ctx
        out = []
        for g in range(ctx.prompts_per_step):
            idx, seed = draw(ctx.seed, step, g, len(ctx.task.train))
            ids = prompt_ids(ctx.tokenizer, ctx.task.train[idx].prompt, ctx.task.template_kwargs)
            out.append(GroupRequest(f"s{step}-g{g}", ids, ctx.group_size, seed, ctx.params))
        return out

    def display(self, ex) -> str:
        """The prompt as the sample inspector shows it (the rendered chat template)."""
        return prompt_text(self.ctx.tokenizer, ex.prompt, self.ctx.task.template_kwargs)

    def _example(self, step: int, g: int):
        idx, _ = draw(self.ctx.seed, step, g, len(self.ctx.task.train))
        return self.ctx.task.train[idx]

    # ---------------------------------------------------------------- producing

    def produced(self, step: int) -> asyncio.Event:
        return self._produced.setdefault(step, asyncio.Event())

    async def produce(self, step: int) -> bool:
        """Generate, score and file one step's groups. False if stopped part-way (the
        partial groups are then in `buffer.pending`)."""
        requests = self.buffer.pending.pop(step, None) or self.requests_for(step)
        t0 = time.perf_counter()
        results = await self._generate_all(step, requests)
        if results is None:
            return False
        elapsed = time.perf_counter() - t0
        examples = [self._example(step, g) for g in range(len(results))]
        scored = await score_groups(self.ctx, examples, results)  # the whole step at once
        groups = []
        for g, (res, ex, sc) in enumerate(zip(results, examples, scored, strict=True)):
            groups.append(
                ScoredGroup(
                    step,
                    g,
                    self.display(ex),
                    ex.answer,
                    res,
                    sc.rewards,
                    sc.correct,
                    generate_s=elapsed,
                    terms=sc.terms,
                    details=sc.details,
                )
            )
        await self.buffer.put(step, groups)
        self.produced(step).set()
        return True

    async def _generate_all(
        self, step: int, requests: list[GroupRequest]
    ) -> list[GroupResult] | None:
        """Generate until every group is complete, resubmitting requests an abort (a weight
        update in abort mode) cut short; their tokens keep the versions that made them."""
        done: dict[str, GroupResult] = {}
        todo = requests
        while todo:
            by_id = {r.request_id: r for r in todo}
            results = await self.ctx.backend.generate(todo)
            if self.stopping or any(r.aborted for r in results):
                await asyncio.sleep(0.01)  # an abort: let the pause/resume around it finish
            todo = []
            for res in results:
                if res.aborted:
                    todo.append(res.resubmission(by_id[res.request_id]))
                else:
                    done[res.request_id] = res
            if todo and self.stopping:
                # Keep the whole step, finished groups included, for the resume.
                cut = {t.request_id: t for t in todo}
                self.buffer.pending[step] = [
                    cut.get(r.request_id) or done[r.request_id].resubmission(r) for r in requests
                ]
                return None
        return [done[r.request_id] for r in requests]

    async def run(self, start: int, end: int) -> None:
        """Async mode: keep producing steps start..end−1, each once the trainer has published
        enough steps for it to be within the staleness bound."""
        for step in range(start, end):
            if step in self.buffer.steps():
                self.produced(step).set()
                continue
            await self.watch.wait_for(step - self.lookahead, lambda: self.stopping)
            while self.control.desired_state() != "running" and not self.stopping:
                await asyncio.sleep(0.05)  # a rollout boundary: hold while paused
            if self.stopping or not await self.produce(step):
                return

    def start(self, start: int, end: int) -> None:
        self.stopping = False
        self.task = asyncio.create_task(self.run(start, end), name="paddock-producer")

    async def stop(self) -> None:
        """Stop the producer task; an in-flight batch is aborted and kept as pending."""
        if self.task is None:
            return
        self.stopping = True
        await self.watch.poke()
        if not self.task.done():
            await self.ctx.backend.pause("abort")
        await self.task  # re-raises a producer failure
        self.task = None
