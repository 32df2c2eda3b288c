"""A time-sliced torch pool engine: one base model in memory with each run's adapter as a
named PEFT adapter, and each generate call decoded under its run's adapter alone, one call
at a time across the pool.

Honest and simple, not fast: rows of different adapters never share a batch (the engine
switches the active adapter between calls), so K runs' generation is serialized. It lets a
torch pool run wherever the torch engine does (the CPU tests and the measurements of
bench/pool_cpu.py); the per-row LoRA decoder that batches rows of every adapter together is
the static decoder's slot table (workers/rollout/static_decode.py).

Each lane is the torch backend itself (its decode loop, sampling, request gate and abort)
over the shared model, so a lane's tokens are those of a run alone's torch engine serving
the same adapter. What differs:
- decoding takes the pool's turn and activates the lane's adapter first;
- an adapter load copies into the lane's own adapter (no turn needed: no other lane reads
  those parameters), between two of its own decode steps;
- `keep` is emulated per run, as the vLLM pool does: the lane's requests are cut (their
  partial tokens kept) and continue under the new adapter when resubmitted. A frozen
  request would hold the pool's turn and stall every other run.
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch
from peft.utils import get_peft_model_state_dict

from ..policy import lora as lora_io
from ..rollout.base import AdapterUpdate, GroupRequest, GroupResult, PauseMode, pause_mode_check
from ..rollout.eos import eos_token_ids
from ..rollout.pool_engine import LanePool
from ..rollout.torch_engine import TorchBackend, draw
from ..spec import LoraSpec, RunSpec


class TorchLane(TorchBackend):
    """One run's adapter on the shared model, served through the torch backend's loop."""

    def __init__(self, pool: TorchLanePool, run_id: str, adapter: str):
        # the torch backend's state, without a model of its own (see TorchBackend.__init__)
        self.pool, self.run_id, self.adapter = pool, run_id, adapter
        self.device = pool.device
        self.max_batch_size = pool.spec.rollout.max_batch_size
        self.continuous = False  # the PEFT forward: batches of max_batch_size rows
        self.overlap = False  # the next step run ahead of the host's recording: GPU decoders
        self.tokenizer, self.eos_id = pool.tokenizer, pool.tokenizer.eos_token_id
        self.eos_ids, self.pad_id = pool.eos_ids, pool.tokenizer.pad_token_id
        self.model = pool.model
        self.decoder = None
        self.draw = pool.draw
        self._stream = None
        self._version = -1
        self._step_lock = threading.Lock()
        self._cond = threading.Condition()
        self._admitting = True
        self._inflight = 0
        self._running = threading.Event()
        self._running.set()
        self._abort = threading.Event()
        self._aborted: list[GroupResult] = []
        self.served_log: list[int] = []
        self.index = get_peft_model_state_dict(pool.model, adapter_name=adapter)

    def _decode(self, requests: list[GroupRequest]) -> list[GroupResult]:
        with self.pool.turn:  # one adapter active on the shared model at a time
            self.model.set_adapter(self.adapter)
            return super()._decode(requests)

    def _load_adapter(self, update: AdapterUpdate) -> int:
        tensors = lora_io.update_tensors(update)
        with self._step_lock:  # between two of its own decode steps
            lora_io.copy_into(self.index, tensors, f"run {self.run_id!r}: ")
            self._version = update.version
            self.served_log.append(update.version)
        return self._version

    async def pause(self, mode: PauseMode) -> None:
        pause_mode_check(mode)
        await super().pause("abort" if mode == "keep" else mode)

    async def close(self) -> None:
        """Leave the pool: abort this run's requests and drop its adapter."""
        await self.abort()
        with self.pool.turn:
            if self.model.active_adapter == self.adapter:
                self.model.set_adapter(self.pool.placeholder)
            self.model.delete_adapter(self.adapter)
        self._version = -1


class TorchLanePool(LanePool):
    """The pool's adapters on one torch model, time-sliced between runs."""

    name = "torch"
    needs_probe = False  # lanes load the trainer's tensors as they are, like the torch engine
    ranks = tuple(range(1, 1025))  # PEFT adapters of any rank side by side: nothing padded
    placeholder = lora_io.ADAPTER_NAME

    def __init__(self, spec: RunSpec, model_dir: str | Path, capacity: int | None = None,
                 max_lora_rank: int | None = None, device: torch.device | None = None):  # fmt: skip
        use_gpu = spec.resources.rollout_gpus > 0 and torch.cuda.is_available()
        self.device = device or torch.device("cuda" if use_gpu else "cpu")
        super().__init__(spec, model_dir, capacity or 8, max_lora_rank or 1024)

    def _start(self) -> None:
        self.tokenizer = lora_io.load_tokenizer(self.model_dir)
        self.eos_ids = frozenset(eos_token_ids(self.model_dir, self.tokenizer.eos_token_id))
        self.model = lora_io.load_spec_model(self.model_dir, self.spec, self.device)  # once
        self.model.eval()
        self.draw = draw
        self.turn = threading.Lock()
        self._names = 0

    async def _new_lane(self, run_id: str, lora: LoraSpec, slot: int) -> TorchLane:
        name = f"lane{self._names}"  # PEFT module keys: no dots, nothing like "lora_"
        self._names += 1
        # its initial weights are never served (admission loads the run's): no RNG drawn
        with self.turn, torch.random.fork_rng(devices=[]):
            self.model.add_adapter(name, lora_io.lora_config(lora))
            self.model.set_adapter(self.placeholder)  # add_adapter leaves it inactive anyway
        return TorchLane(self, run_id, name)

    async def _shutdown(self) -> None:
        self.model = None  # type: ignore[assignment]
