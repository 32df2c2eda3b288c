"""The TensorRT-LLM pool engine: one `AsyncLLM` with `LoraConfig(max_loras = the pool's
adapter slots)` and one lane per run (workers/rollout/pool_engine.py says what a lane
promises). Written against the TensorRT-LLM 1.2 LLM API and run here only on the stand-in
engine (tests/workers/rollout/trtllm_standin.py); docs/backends.md lists what never ran.

- Each request carries its run's `LoRARequest`; requests of all runs are submitted together
  and the engine's in-flight batching decodes rows of different adapters in one batch.
- A version is a new PEFT directory with a new `lora_int_id`, unique across the pool (the
  engine caches adapters by id, so an id is never reused): every token of a request comes
  from the one version its id names, which labels it.
- The engine's only pause (`pause_generation()`) cancels every run's requests, so a lane
  never calls it: pausing run A aborts A's own requests (`RequestOutput.abort()`), and
  `keep` resubmits A's partials once A resumes, as the single-adapter backend emulates it.
- No adapter is ever removed from the engine (the API has no call for it): a run's old ids
  fall out of the engine's LRU caches. The host cache holds two ids per slot, so a run's
  new version evicts some run's previous version, never another run's current one.
"""

from __future__ import annotations

import itertools
import shutil
from typing import Any

from ..spec import LoraSpec, RunSpec
from .pool_engine import LanePool
from .trtllm_backend import TRTLLM_RANKS, TrtllmBackend, _import_trtllm, start_engine


class TrtllmLane(TrtllmBackend):
    """One run's adapter on the pool's engine."""

    _pauses_engine = False

    def __init__(self, pool: TrtllmPoolEngine, run_id: str, spec: RunSpec, llm: Any):
        super().__init__(spec, pool.model_dir)
        self.run_id = run_id
        self._llm = llm
        self._int_ids = pool.int_ids  # unique across every run of the pool

    async def _pause_engine(self, llm: Any) -> None:
        """Stop this run's requests only: no new submission, the ones in flight aborted."""
        self._engine_paused = True
        for handle in list(self._handles):
            handle.abort()
        await self._gate.wait(lambda: self._live == 0)

    async def _resume_engine(self, llm: Any) -> None:
        self._engine_paused = False

    async def close(self) -> None:
        """Leave the pool: abort this run's requests; its ids age out of the engine's cache."""
        await self.abort()
        self._lora, self._version = None, -1
        shutil.rmtree(self._root, ignore_errors=True)


class TrtllmPoolEngine(LanePool):
    """The pool's adapters on one TensorRT-LLM engine, started when the first run joins."""

    name = "trtllm"
    ranks = TRTLLM_RANKS

    def _start(self) -> None:
        self.dtype = "float32" if self.spec.model.dtype == "float32" else "bfloat16"
        self._trt = _import_trtllm()
        self.llm: Any = None  # started when the first run joins (construction is awaited)
        self.int_ids = itertools.count(1)

    async def _new_lane(self, run_id: str, lora: LoraSpec, slot: int) -> TrtllmLane:
        if self.llm is None:
            self.llm = await start_engine(
                self._trt,
                self.spec,
                self.model_dir,
                self.dtype,
                max_lora_rank=self.max_lora_rank,
                max_loras=self.capacity,
                max_cpu_loras=max(self.spec.rollout.max_cpu_loras, 2 * self.capacity),
            )
        return TrtllmLane(self, run_id, self.spec.model_copy(update={"lora": lora}), self.llm)

    async def _shutdown(self) -> None:
        if self.llm is not None:
            self.llm.shutdown()
