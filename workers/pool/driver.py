"""The pool driver: K runs in one process over one base model (docs/pools.md).

One `LoraPolicy` (workers/policy/policy.py) holds every member's adapter, one pool
engine (workers/rollout/pool_engine.py, the registry's `make_pool_engine`) serves them, a
slot each, and each member is driven by the single-run loop (`run_training`,
workers/loop/setup.py) over its side of both (workers/pool/members.py). So each member keeps
what a run alone has: its own spec values where they may differ (data, reward, algorithm,
LoRA rank, sampling, async settings), step counter, RNG, checkpoints, metrics and event
stream, and its own control (pause, resume, abort). The trainer's time and the engine's
generation turns go to the members by weighted fair share (workers/pool/gate.py;
`resources.pool_weight`, equal by default); a trainer turn steps every member whose batch is
waiting, in one forward and backward over the base model (`batched_trainer`, the default;
LoraPolicy.train_steps).

Members join while the pool lives (`admit`: a fresh adapter, or the one of `resume_from`)
and leave (`leave`: checkpoint, the engine slot freed, no final status). A member's
exception or diverged loss fails that member alone, through its own events.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..events import Event, StatusEvent
from ..grants import Grants
from ..loop.control import ControlSource, StaticControl
from ..loop.driver import Outcome
from ..loop.events import EventHook, MetricsHook, early_log
from ..loop.setup import local_devices, model_dir_for, run_training
from ..names import TERMINAL_RUN_STATES
from ..policy import LoraPolicy
from ..policy.adapter import Adapter
from ..pool_key import misfit, pool_key
from ..rollout.engine_process import EngineProcess
from ..rollout.pool_engine import PoolAdmissionError, PoolEngine
from ..rollout.registry import make_pool_engine
from ..spec import RunSpec, parse_spec
from .gate import FairGate, TrainTurns
from .members import LaneBackend, PooledExecutor

log = logging.getLogger(__name__)


@dataclass
class Member:
    run_id: str
    spec: RunSpec
    out: Path
    control: ControlSource
    grants: Grants | None = None  # its own secrets: never another member's
    task: asyncio.Task | None = None
    leaving: bool = False
    ended: str | None = None  # the terminal status it reported, if any
    outcome: Outcome | None = None
    error: BaseException | None = None
    events: list[Event] = field(default_factory=list)  # kept only with `keep_events`


class PoolDriver:
    """The pool's trainer, engine and members. The trainer and the engine start with the
    first member (whose spec fixes the pool key); `close` stops them."""

    def __init__(
        self,
        capacity: int | None = None,
        max_lora_rank: int | None = None,
        key: dict | None = None,
        cluster: str | None = None,
        keep_events: bool = False,
        batched_trainer: bool = True,
        engine_process: bool | None = None,
    ):
        """`batched_trainer`: each trainer turn steps every member whose batch is waiting in
        one forward and backward (LoraPolicy.train_steps); False: one member's step a
        turn (bench/pool_cpu.py measures both). `engine_process`: the pool engine in a child
        process (workers/rollout/engine_process.py), so that decoding and training each have
        an interpreter of their own (13 % off a CPU pool's wall-clock, docs/pools.md); None
        (the default): in this process. `capacity` (default: the first member's
        `rollout.max_loras`) and `max_lora_rank` (default: the engine's) fix the engine's
        adapter slots when it starts."""
        self.capacity, self.max_lora_rank = capacity, max_lora_rank
        self.key, self.cluster = key, cluster
        self.keep_events = keep_events
        self.trainer: LoraPolicy | None = None
        self.adapters: dict[str, Adapter] = {}  # each member's, on the trainer
        self.engine: PoolEngine | None = None
        self.trainer_gate = FairGate(slots=1)
        self.batched_trainer = batched_trainer
        self.engine_process = engine_process
        self.train_turns = (
            TrainTurns(self.trainer_gate, self._train_steps, cost=_tokens)
            if batched_trainer
            else None
        )
        self.gen_gate: FairGate | None = None
        self.members: dict[str, Member] = {}
        self.trainer_cpu_s = 0.0  # the batched train turns' CPU seconds (bench/pool_cpu.py)

    # ---------------------------------------------------------------- the shared parts

    def _start(self, spec: RunSpec, log: Callable[[str], None]) -> None:
        model_dir = model_dir_for(spec, log=log)  # a tiny model's build: to the first member
        trainer_device, engine_device = local_devices(spec, torch.cuda.device_count())
        # the policy's own adapter is a placeholder no member trains (rank 1): each member
        # gets one of its own (add_adapter), made and dropped as it joins and leaves
        host = spec.model_copy(update={"lora": spec.lora.model_copy(update={"r": 1})})
        trainer = LoraPolicy(host, model_dir, trainer_device)
        slots = (self.capacity, self.max_lora_rank)
        if self.engine_process is None:  # opt-in: see fork_is_safe for what a fork risks
            self.engine_process = False
        if self.engine_process:
            self.engine = EngineProcess(spec, model_dir, engine_device, pool=slots)
        else:
            self.engine = make_pool_engine(spec, model_dir, *slots, device=engine_device)
        self.trainer = trainer  # both started, or neither: a failed start is tried again
        # one generation turn at a time where the engine decodes one adapter at a time;
        # engines that batch every adapter's rows take every member's calls together
        slots = self.engine.capacity if self.engine.batches_adapters else 1
        self.gen_gate = FairGate(slots=slots)
        self.key = self.key or pool_key(spec)

    def _train_steps(self, works: dict[str, tuple[Adapter, Any]]) -> dict:
        """A batched turn: each waiting member's (adapter, batch) → its metrics or error."""
        t0 = time.thread_time()  # in the trainer's thread: its own CPU, not its wall-clock
        try:
            return dict(zip(works, self.trainer.train_steps(list(works.values())), strict=True))
        finally:
            self.trainer_cpu_s += time.thread_time() - t0

    def check(self, run_id: str, spec: RunSpec) -> None:
        """Raise PoolAdmissionError unless the run may join now, with the reason."""
        held = self.members.get(run_id)
        if held is not None and (held.task is None or not held.task.done()):
            raise PoolAdmissionError(f"run {run_id} is already in the pool")
        if self.key is not None:
            why = misfit(spec, self.key, self.cluster)
            if why:
                raise PoolAdmissionError(f"run {run_id} does not fit the pool: {why}")
        if self.engine is not None:
            self.engine.check_admission(run_id, spec.lora)

    # ---------------------------------------------------------------- members

    def admit(
        self,
        run_id: str,
        spec: RunSpec | dict,
        out: str | Path,
        control: ControlSource | None = None,
        on_event: EventHook | None = None,
        on_metrics: MetricsHook | None = None,
        resume_from: str | None = None,
        weight: float | None = None,
        progress: bool = False,
        grants: Grants | None = None,
    ) -> Member:
        """Start the run in the pool (its loop a task of this event loop): a fresh adapter,
        or `resume_from`'s checkpoint (a pooled or a solo run's). Raises
        PoolAdmissionError, before anything starts, if it cannot join."""
        spec = parse_spec(spec) if isinstance(spec, dict) else spec
        if resume_from:
            spec = spec.model_copy(
                update={
                    "checkpoint": spec.checkpoint.model_copy(update={"resume_from": resume_from})
                }
            )
        self.check(run_id, spec)
        if self.trainer is None:
            self._start(spec, early_log(on_event, progress))
        member = Member(run_id, spec, Path(out), control or StaticControl(), grants)
        w = weight if weight is not None else spec.resources.pool_weight
        self.trainer_gate.join(run_id, w)
        self.gen_gate.join(run_id, w)
        self.members[run_id] = member
        member.task = asyncio.create_task(
            self._run(member, self._hook(member, on_event), on_metrics, progress),
            name=f"paddock-pool-{run_id}",
        )
        return member

    def set_weight(self, run_id: str, weight: float) -> None:
        for gate in (self.trainer_gate, self.gen_gate):
            if gate is not None and run_id in gate.share.clocks:
                gate.share.set_weight(run_id, weight)

    async def leave(self, run_id: str) -> Outcome | None:
        """The run leaves at its next step boundary (or now, if paused): checkpointed, its
        engine slot and trainer adapter freed, no final status."""
        member = self.members[run_id]
        member.leaving = True
        if member.task is not None:
            await asyncio.shield(member.task)
        return member.outcome

    async def wait(self) -> dict[str, Member]:
        """Until every member's loop has ended."""
        tasks = [m.task for m in self.members.values() if m.task is not None]
        if tasks:
            await asyncio.gather(*tasks)
        return self.members

    async def close(self) -> None:
        for run_id, m in list(self.members.items()):
            if m.task is not None and not m.task.done():
                await self.leave(run_id)
        if self.engine is not None:
            await self.engine.close()

    def _hook(self, member: Member, on_event: EventHook | None) -> EventHook:
        def hook(event: Event) -> None:
            if isinstance(event, StatusEvent) and event.state in TERMINAL_RUN_STATES:
                member.ended = event.state
            if self.keep_events:
                member.events.append(event)
            if on_event is not None:
                on_event(event)

        return hook

    async def _run(
        self,
        m: Member,
        on_event: EventHook,
        on_metrics: MetricsHook | None,
        progress: bool,
    ) -> None:
        leaving: Callable[[], bool] = lambda: m.leaving  # noqa: E731
        try:
            # Adding (and below, removing) a PEFT adapter changes the model's module dicts and
            # reseeds the global RNG for its init: never while another member's step runs in
            # the trainer's thread, so it takes the trainer's turn like a checkpoint does.
            async with self.trainer_gate.exclusive(m.run_id):
                adapter = await asyncio.to_thread(self.trainer.add_adapter, m.spec)
                self.adapters[m.run_id] = adapter
            m.outcome = await run_training(
                m.spec,
                m.out,
                control=m.control,
                on_metrics=on_metrics,
                on_event=on_event,
                progress=progress,
                executor=PooledExecutor(
                    self.trainer,
                    adapter,
                    m.run_id,
                    self.trainer_gate,
                    self.gen_gate,
                    self.train_turns,
                ),
                backend=LaneBackend(self.engine, m.run_id, m.spec.lora, self.gen_gate),
                leave=leaving,
                grants=m.grants,
            )
        except Exception as exc:  # this member fails alone; the pool goes on
            m.error = exc
            log.warning("pooled run %s failed: %s: %s", m.run_id, type(exc).__name__, exc)
            if m.ended is None:  # failed before its loop ran (data, checkpoint, engine)
                tail = "".join(traceback.format_exception(exc))[-4000:]
                on_event(StatusEvent.now("failed", f"{type(exc).__name__}: {exc}\n{tail}"))
        finally:
            self.trainer_gate.leave(m.run_id)
            self.gen_gate.leave(m.run_id)
            adapter = self.adapters.pop(m.run_id, None)
            if adapter is not None:
                async with self.trainer_gate.exclusive(m.run_id):
                    await asyncio.to_thread(self.trainer.remove_adapter, adapter)
            if m.run_id in self.engine.served_versions():  # its loop's close normally did it
                await self.engine.unload_adapter(m.run_id)


def _tokens(work) -> float:
    """A member's step's cost in a shared turn: its batch's tokens (prompt and response)."""
    _, batch = work
    return float(batch.attention_mask.sum())
