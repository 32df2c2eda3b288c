"""The rollout side of the loop: draws a step's prompts, runs each group's episodes (one
turn each without an environment: workers/envs/episode.py), scores them, and files them in
the buffer. The sync driver calls `produce(step)` inline; the async driver runs `run()` as a
task that stays at most `lookahead` steps ahead of the trainer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..envs import GroupProgress
from ..envs.episode import episode_record
from ..rollout.base import GroupRequest
from .buffer import TrajectoryBuffer
from .control import ControlSource
from .rollout_context import RolloutContext
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
        self.runner = ctx.runner(lambda: self.stopping)

    # ---------------------------------------------------------------- requests

    def groups_for(self, step: int) -> list[GroupProgress]:
        ctx = self.ctx
        out = []
        for g in range(ctx.prompts_per_step):
            _, seed = draw(ctx.seed, step, g, len(ctx.task.train))
            out.append(GroupProgress(f"s{step}-g{g}", ctx.group_size, seed, ctx.params))
        return out

    def _example(self, step: int, g: int):
        idx, _ = draw(self.ctx.seed, step, g, len(self.ctx.task.train))
        return self.ctx.task.train[idx]

    # ---------------------------------------------------------------- producing

    def produced(self, step: int) -> asyncio.Event:
        return self._produced.setdefault(step, asyncio.Event())

    async def produce(self, step: int) -> bool:
        """Run, score and file one step's groups. False if stopped part-way (the groups'
        progress, finished ones included, is then in `buffer.pending` for the resume)."""
        progress = [
            _progress(p, self.ctx)
            for p in self.buffer.pending.pop(step, None) or self.groups_for(step)
        ]
        examples = [self._example(step, g) for g in range(len(progress))]
        t0 = time.perf_counter()
        done = await asyncio.gather(
            *(self.runner.run_group(p, ex) for p, ex in zip(progress, examples, strict=True))
        )
        if any(d is None for d in done):
            self.buffer.pending[step] = progress
            return False
        elapsed = time.perf_counter() - t0
        scored = await score_groups(self.ctx, examples, done)  # the whole step at once
        groups = []
        for g, (eps, ex, sc) in enumerate(zip(done, examples, scored, strict=True)):
            groups.append(
                ScoredGroup(
                    step,
                    g,
                    self.ctx.chat().prompt_text(eps.prompt),
                    ex.answer,
                    eps.result,
                    sc.rewards,
                    sc.correct,
                    generate_s=elapsed,
                    terms=sc.terms,
                    details=sc.details,
                    episodes=tuple(episode_record(s) for s in eps.states)
                    if self.ctx.env is not None
                    else (),
                )
            )
        await self.buffer.put(step, groups)
        self.produced(step).set()
        return True

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


def _progress(item: GroupProgress | GroupRequest, ctx: RolloutContext) -> GroupProgress:
    """A pending group as progress; checkpoints written before episodes hold the group's
    request (with its partial samples) instead."""
    if isinstance(item, GroupProgress):
        return item
    return GroupProgress(item.request_id, item.n, item.seed, item.params, request=item)
