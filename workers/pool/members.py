"""What one pooled run's loop talks to: the executor and the rollout backend of a run alone
(workers/loop/executor.py, workers/rollout/base.py), over the pool's shared trainer and
engine. So a pooled run is driven by the single-run loop itself (workers/loop/driver.py):
its steps, checkpoints, metrics, pause, resume and abort are a run alone's.

- `PooledExecutor`: the run's adapter on the pool's policy, the executor of a run alone
  with turns. A train step waits for the next turn of the trainer, which steps every run
  whose batch is waiting in one forward and backward (`TrainTurns`; unbatched: the run's
  own fair turn, `FairGate`); a publish with the handshake's probe and checkpoints take the
  trainer briefly (the probe switches the shared model's active adapter). After a step
  whose loss or gradient is not finite the run fails (its own error, its adapter alone).
- `LaneBackend`: the run's lane of the pool engine. A generate call waits for the run's fair
  turn of the engine's generation slots; a pause, resume or abort touches this run's
  requests only; `close` is the run leaving the engine (its slot freed).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from pathlib import Path

import torch

from ..adapters.update import AdapterUpdate
from ..loop.checkpoint import load_trainer, save_trainer
from ..loop.executor import LocalExecutor
from ..names import MEMORY_METRICS, POOL_METRICS
from ..policy import LoraPolicy, TrainSample, collate
from ..policy.adapter import Adapter
from ..rollout.base import GroupRequest, GroupResult, PauseMode, pause_mode_check
from ..rollout.pool_engine import PoolEngine, PoolRequest
from ..spec import LoraSpec
from .gate import FairGate, TrainTurns

# a step's values that must be finite for the run to go on (a NaN there is in its adapter)
FINITE = ("loss/total", "grad_norm")


class PooledExecutor(LocalExecutor):
    """One run's adapter on the pool's policy, as the loop's `TrainerExecutor`."""

    # a CPU copy: the pool's engine may be in another process (rollout/engine_process.py)
    publish_on_device = False

    def __init__(
        self,
        policy: LoraPolicy,
        adapter: Adapter,
        run_id: str,
        gate: FairGate,
        gen: FairGate,
        turns: TrainTurns | None = None,
    ):
        """`turns`: train steps go in the pool's batched turns (every waiting run's step in
        one forward and backward, `LoraPolicy.train_steps`); None: this run's step alone in
        its own turn of `gate`."""
        super().__init__(policy, adapter)
        self.run_id, self.gate, self.gen, self.turns = run_id, gate, gen, turns

    async def train_step(self, samples: list[TrainSample]) -> dict[str, float]:
        batch = collate(samples, self.policy.tokenizer.pad_token_id)
        if self.turns is not None:
            metrics = await self.turns.step(self.run_id, (self.adapter, batch))
        else:
            async with self.gate.turn(self.run_id):
                metrics = await asyncio.to_thread(self._train_step, batch)
        bad = [k for k in FINITE if k in metrics and not math.isfinite(metrics[k])]
        if bad:
            raise FloatingPointError(
                f"pooled run {self.run_id}: {', '.join(f'{k}={metrics[k]}' for k in bad)} at "
                f"adapter version {self.adapter.version}: its adapter diverged; the run stops "
                "(the pool's other runs go on)"
            )
        share, wait, gen_share, gen_wait = POOL_METRICS
        trainer, gen = self.gate.metrics(self.run_id), self.gen.metrics(self.run_id)
        metrics.update({share: trainer[share], wait: trainer[wait]})
        metrics.update({gen_share: gen[share], gen_wait: gen[wait]})
        metrics.update(memory_metrics())
        return metrics

    async def adapter_update(self, with_probe: bool = True) -> AdapterUpdate:
        if not with_probe:
            # A copy of this run's tensors only: no forward, the shared model untouched, and
            # nothing of this run changes while its loop publishes (its next step comes
            # after), so it need not wait for other runs' trainer turns.
            return await asyncio.to_thread(self.publish, False)
        async with self.gate.exclusive(self.run_id):  # the probe switches the active adapter
            return await asyncio.to_thread(self.publish, True)

    async def save(self, out: Path) -> None:
        async with self.gate.exclusive(self.run_id):
            await asyncio.to_thread(save_trainer, out, self.policy, self.adapter)

    async def load(self, src: Path) -> None:
        async with self.gate.exclusive(self.run_id):
            await asyncio.to_thread(load_trainer, src, self.policy, self.adapter)


class LaneBackend:
    """One run's lane of the pool engine, as the loop's `RolloutBackend`. The lane exists
    from the run's first adapter load (its admission) to `close` (its leaving)."""

    placeable = False  # the pool's engine is placed once, for every run

    def __init__(self, engine: PoolEngine, run_id: str, lora: LoraSpec, gen: FairGate):
        self.engine, self.run_id, self.lora, self.gen = engine, run_id, lora, gen
        self.name = f"{engine.name} pool"
        self.needs_probe = engine.needs_probe
        self.generate_s = 0.0  # engine seconds of this run's turns

    @property
    def served_version(self) -> int:
        return self.engine.served_versions().get(self.run_id, -1)

    @property
    def admitted(self) -> bool:
        return self.run_id in self.engine.served_versions()

    async def generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        async with self.gen.turn(self.run_id):
            t0 = time.perf_counter()
            try:
                return await self.engine.generate([PoolRequest(self.run_id, r) for r in requests])
            finally:
                self.generate_s += time.perf_counter() - t0

    async def load_adapter(self, update: AdapterUpdate) -> int:
        return await self.engine.load_adapter(self.run_id, update, self.lora)

    async def pause(self, mode: PauseMode) -> None:
        pause_mode_check(mode)
        if self.admitted:  # before its first load the run has nothing in the engine
            await self.engine.pause(self.run_id, mode)

    async def resume(self) -> None:
        if self.admitted:
            await self.engine.resume(self.run_id)

    async def abort(self) -> list[GroupResult]:
        return await self.engine.abort(self.run_id) if self.admitted else []

    async def close(self) -> None:
        if self.admitted:
            await self.engine.unload_adapter(self.run_id)


def memory_metrics() -> dict[str, float]:
    """The pool process's memory (all members together): resident set and, with CUDA, what
    torch holds on every GPU, in GB."""
    cpu, gpu = MEMORY_METRICS
    page = os.sysconf("SC_PAGE_SIZE")
    with open("/proc/self/statm") as f:  # Linux: resident pages are the second field
        out = {cpu: int(f.read().split()[1]) * page / 1e9}
    if torch.cuda.is_available():
        held = sum(torch.cuda.memory_reserved(d) for d in range(torch.cuda.device_count()))
        out[gpu] = held / 1e9
    return out
