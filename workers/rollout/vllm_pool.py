"""The vLLM pool engine: one `AsyncLLM` with `enable_lora`, `max_loras` = the pool's adapter
slots, and one lane per run (workers/rollout/pool_engine.py says what a lane promises).

- Each run has its own `lora_int_id` (its slot, 1 … max_loras) and its own `LoRARequest`;
  a new version of its adapter is loaded in place under that id (`load_inplace=True`) from
  a PEFT directory in RAM, exactly as the single-adapter backend does. Requests of all runs
  are submitted together, and vLLM's scheduler batches rows of different adapters in one
  step (its LoRA kernels gather each row's adapter from its slot).
- A run's adapter is reloaded only while that run has no request in the engine (its lane
  is paused: `abort` and `wait` as in the single backend, `keep` emulated by cutting the
  run's requests and continuing them after resume). So every token of a request comes from
  the version the lane served when it was submitted, and that is its label; the engine's
  single global weight version (`update_weight_version`) cannot tell runs apart and is not
  used.
- No prefix-cache reset: vLLM keys cached KV blocks by the LoRA name and path
  (vllm/v1/core/kv_cache_utils.py, `_gen_lora_extra_hash_keys`), and each load gets a new
  name, so no request ever reads blocks computed under another version or another run's
  adapter, and the other runs' running requests are not preempted.
- The handshake per run: vLLM lists the run's id after the load, and the engine's logprobs
  of the trainer's probe under the run's new `LoRARequest` match the trainer's.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

from ..adapters import files as adapter_files
from ..adapters.update import AdapterUpdate, check_probe
from ..spec import LoraSpec, RunSpec
from .base import PauseMode, pause_mode_check
from .pool_engine import LanePool
from .vllm_backend import VllmBackend, _start_engine


class VllmLane(VllmBackend):
    """One run's adapter on the pool's engine: the single-adapter backend's requests, probe
    and acknowledgement, with a pause that touches this run's requests only."""

    _emulates_keep = True

    def __init__(self, pool: VllmPoolEngine, run_id: str, spec: RunSpec, lora_id: int):
        self.run_id = run_id
        self._init_lane(spec, pool.model_dir, pool._vllm, pool.engine, pool.dtype, lora_id)
        self._loads = itertools.count()

    async def _swap_in(self, update: AdapterUpdate, path: Path) -> None:
        if self._version >= 0 and self._gate.open:
            raise RuntimeError(
                f"vllm pool: pause run {self.run_id!r} before loading adapter version "
                f"{update.version}: its requests in flight would run on a version they are "
                "not labelled with"
            )
        if self._live:
            raise RuntimeError(f"vllm pool: run {self.run_id!r} still has requests in the engine")
        # a name of its own per load: the prefix cache keys KV blocks by name and path
        await self._add_lora(f"paddock-{self.run_id}-v{update.version}-{next(self._loads)}", path)

    async def _handshake(self, update: AdapterUpdate) -> float:
        await self._check_listed()
        got = await self._probe_logprobs(update.probe)
        return check_probe(
            f"vllm pool run {self.run_id!r}", update.version, update.probe, got, self.probe_atol
        )

    async def pause(self, mode: PauseMode) -> None:
        pause_mode_check(mode)
        await self._gate.close(mode)
        if mode == "wait":
            await self._gate.idle()
        elif mode == "keep":
            await self._cut_live()  # the calls stay in flight and continue after resume
        else:
            await self._drain()

    async def resume(self) -> None:
        await self._gate.reopen()

    async def _abort_in_flight(self) -> None:
        await self._drain()  # a lane never freezes the engine: nothing to thaw first

    async def close(self) -> None:
        """Leave the pool: abort this run's requests and remove its adapter."""
        await self.abort()
        if self._version >= 0 or self._lora is not None:
            await self.engine.remove_lora(self.lora_id)
            if self.lora_id in await self.engine.list_loras():
                raise RuntimeError(f"vLLM still lists adapter id {self.lora_id} after removing it")
        self._lora, self._version = None, -1
        shutil.rmtree(self._root, ignore_errors=True)


class VllmPoolEngine(LanePool):
    """The pool's adapters on one vLLM engine, started with the pool."""

    name = "vllm"
    ranks = adapter_files.VLLM_LORA_RANKS

    def _start(self) -> None:
        self._vllm, self.engine, self.dtype = _start_engine(
            self.spec, self.model_dir, max_loras=self.capacity, max_lora_rank=self.max_lora_rank
        )

    async def _new_lane(self, run_id: str, lora: LoraSpec, slot: int) -> VllmLane:
        return VllmLane(self, run_id, self.spec.model_copy(update={"lora": lora}), slot)

    async def _shutdown(self) -> None:
        self.engine.shutdown()
