"""The torch engine's runs: a lane per adapter (the rollout protocol of base.py over the
engine), the engine with one adapter for a run alone (`TorchBackend`), and with a slot per
run for a pool (`TorchPool`, the pool protocol of pool_engine.py).

A lane's pause touches its own rows only: `abort` ends them now (their partial tokens come
back), `wait` lets them finish while its new requests wait, `keep` takes them out of the
batch with their tokens and puts them back once it resumes, under the adapter it then has
(their prefix prefilled anew: each token is what a trainer forward of the version it is
labelled with gives, which the rollout correction and token_mult_prob_error assume). An
adapter load takes the lane's rows out the same way first, so a token is labelled with the
version that made it whether or not the run paused.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import torch
from transformers import AutoConfig

from ...adapters import lora as lora_io
from ...adapters.update import AdapterUpdate
from ...spec import LoraSpec, RunSpec
from ..base import GroupRequest, GroupResult, PauseMode, pause_mode_check
from ..gate import RequestGate, unfinished
from ..pool_engine import LanePool
from .engine import TorchEngine, engine_device
from .rows import Adapter
from .sources import decodes_static


class TorchLane:
    """One adapter of the torch engine as a rollout backend: its request gate, version,
    handshake and pause; the decoding is the engine's."""

    name = "torch"
    # loads the trainer's tensors as they are: no handshake needed (a probe an update
    # carries is checked all the same)
    needs_probe = False
    placeable = True  # the engine takes a device (an in-process run's second GPU)

    def __init__(self, engine: TorchEngine, adapter: Adapter, lora: LoraSpec, who: str):
        self.engine, self.adapter, self.lora, self.who = engine, adapter, lora, who
        self._gate = RequestGate()
        self.unusable: str | None = None  # why the last handshake failed
        self.handshakes: list[dict[str, float]] = []  # {version, probe_err} (for tests)
        self.served_log: list[int] = []  # every version acknowledged, in order (for tests)

    @property
    def served_version(self) -> int:
        return self.adapter.version

    @property
    def tokens_streamed(self) -> int:
        """Tokens decoded under this adapter so far."""
        return self.adapter.tokens

    async def generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        if self.unusable is not None:
            raise RuntimeError(f"{self.who} is unusable: {self.unusable}")
        if self.adapter.version < 0:
            raise RuntimeError(f"{self.who}: no adapter acknowledged yet; call load_adapter first")
        self.engine.check(requests)
        return await self._gate.run_all(requests, self._decode)

    async def _decode(self, requests: list[GroupRequest]) -> list[GroupResult]:
        if self._gate.cut:  # an abort began between admission and here
            return [unfinished(r) for r in requests]
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in requests]
        self.engine.submit(self.adapter, requests, futures)
        return list(await asyncio.gather(*futures))

    async def load_adapter(self, update: AdapterUpdate) -> int:
        try:
            err = await asyncio.to_thread(self._load, update)
        except RuntimeError as exc:
            self.unusable = str(exc)
            raise
        self.unusable = None  # a later version that passes the handshake heals the run
        if err is not None:
            self.handshakes.append({"version": update.version, "probe_err": err})
        self.served_log.append(update.version)
        return self.adapter.version

    def _load(self, update: AdapterUpdate) -> float | None:
        tensors = lora_io.update_tensors(update)
        return self.engine.load(
            self.adapter, tensors, self.lora, update.version, update.probe, self.who
        )

    async def pause(self, mode: PauseMode) -> None:
        pause_mode_check(mode)
        await self._gate.close(mode)
        if mode == "keep":
            await asyncio.to_thread(self.engine.hold, self.adapter)
        elif mode == "abort":
            await asyncio.to_thread(self.engine.cut, self.adapter)
            await self._gate.idle()
        else:
            await self._gate.idle()

    async def resume(self) -> None:
        await self._gate.reopen()
        if self.adapter.held:  # paused with keep: its groups wait out of the batch
            await asyncio.to_thread(self.engine.release, self.adapter)

    async def abort(self) -> list[GroupResult]:
        await self._gate.change(aborting=True, aborted=[])
        await asyncio.to_thread(self.engine.cut, self.adapter)
        await self._gate.idle()
        await self._gate.change(aborting=False)
        return list(self._gate.aborted)

    async def close(self) -> None:
        """Abort this adapter's requests; a pool's run then leaves its slot."""
        await self.abort()
        await asyncio.to_thread(self.engine.leave, self.adapter)


class TorchBackend(TorchEngine, TorchLane):
    """A run alone: the torch engine with one adapter, the spec's own (the static decoder
    folds it into its weights), serving it as its own lane."""

    def __init__(self, spec: RunSpec, model_dir: str | Path, device: torch.device | None = None):
        TorchEngine.__init__(self, spec, model_dir, device)
        TorchLane.__init__(self, self, Adapter(None), spec.lora, "torch backend")

    async def tokens(self) -> int:
        """Tokens decoded so far (what a test waits on, here or across an engine process)."""
        return self.tokens_streamed

    async def close(self) -> None:
        if self.model is not None:
            await TorchLane.close(self)
            await asyncio.to_thread(self.shutdown)


class TorchPool(LanePool):
    """A pool's runs on one torch engine, a slot each: in the static decoder's table (every
    run's rows in one decode step and one CUDA graph; a load is a copy into the slot, zero-
    padded to the pool's rank) or, with the PEFT forward (the CPU's default), a named PEFT
    adapter each (one run's rows a batch, any ranks side by side)."""

    name = "torch"
    needs_probe = False
    placeable = True
    ranks = tuple(range(1, 1025))  # any rank: slots are zero-padded to the pool's

    def __init__(
        self,
        spec: RunSpec,
        model_dir: str | Path,
        capacity: int | None = None,
        max_lora_rank: int | None = None,
        device: torch.device | None = None,
    ):
        self.device = device or engine_device(spec)
        config = AutoConfig.from_pretrained(str(model_dir))
        self.batches_adapters = decodes_static(spec.rollout, self.device, config)
        # the slot table is sized by one rank: the founding run's unless told (a later run
        # above it is refused); PEFT adapters of any rank sit side by side
        rank = max_lora_rank or (None if self.batches_adapters else self.ranks[-1])
        super().__init__(spec, model_dir, capacity, rank)

    def _start(self) -> None:
        self.engine = TorchEngine(
            self.spec, self.model_dir, self.device, self.capacity, self.max_lora_rank
        )

    async def _new_lane(self, run_id: str, lora: LoraSpec, slot: int) -> TorchLane:
        adapter = await asyncio.to_thread(self.engine.join, slot - 1, lora)
        return TorchLane(self.engine, adapter, lora, f"torch pool run {run_id!r}")

    async def _shutdown(self) -> None:
        await asyncio.to_thread(self.engine.shutdown)
