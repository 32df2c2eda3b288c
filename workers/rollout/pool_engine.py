"""The multi-adapter engine protocol: one engine holds the base model once and serves the
LoRA adapters of several runs, rows of different adapters decoding in one batch.

Each run is a *lane*: a single-adapter `RolloutBackend` (its own gate, requests in flight,
adapter version and version handshake) on the shared engine, in an adapter slot of its own.
The pool engine routes each request to its run's lane and submits every lane's requests to
the engine together, which batches them (vLLM's scheduler, TensorRT-LLM's in-flight
batching); it also admits runs into slots and frees them.

The promises of `base.py` hold per run:
- a sample of run A is labelled `(A, v)` only if the engine had acknowledged serving A's
  adapter at version v (A's `load_adapter` passed A's probe) when it produced the tokens;
- an adapter of run A changes only while A is paused (`pause(A, mode)`, as a single engine
  is paused around `load_adapter`), and pausing A touches no other run's requests: `keep`
  is emulated per run (A's requests are cut, their partial tokens kept, and continued under
  the new adapter once A resumes), never a freeze of the whole engine.

Admission is refused, with the reason, beyond the engine's adapter slots or above the LoRA
rank the engine was started with (adapters of a smaller rank are zero-padded to it by the
engine; see docs/pools.md).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..adapters import files as adapter_files
from ..adapters.update import AdapterUpdate
from ..spec import LoraSpec, RunSpec
from .base import GroupRequest, GroupResult, PauseMode, RolloutBackend


class PoolAdmissionError(ValueError):
    """A run cannot join the pool engine (no free adapter slot, or a rank above the pool's)."""


@dataclass
class PoolRequest:
    """One group for one run's adapter. `version`, when set, is the adapter version the
    caller last had acknowledged for that run: the engine refuses the request if it serves
    another one (the caller's view is stale). The tokens' labels are always the versions the
    engine served them with."""

    run_id: str
    group: GroupRequest
    version: int | None = None


@runtime_checkable
class PoolEngine(Protocol):
    name: str
    # whether load_adapter checks the update's probe (the trainer computes one only then)
    needs_probe: bool
    # whether the constructor takes a `device` (an in-process engine; the others place
    # themselves by their own settings)
    placeable: bool
    # whether rows of several adapters share a decode batch; if not, the engine decodes one
    # adapter's rows at a time and a pool gives its runs generation turns one at a time
    batches_adapters: bool
    capacity: int  # adapter slots (`rollout.max_loras` unless the pool says)
    max_lora_rank: int

    def served_versions(self) -> dict[str, int]:
        """Run id → the adapter version the engine acknowledged for it."""

    def check_admission(self, run_id: str, lora: LoraSpec) -> None:
        """Raise PoolAdmissionError unless `run_id` could join now."""

    async def load_adapter(self, run_id: str, update: AdapterUpdate, lora: LoraSpec) -> int:
        """Admit the run (first call: takes a slot) or update its adapter (the run must be
        paused); returns the version the engine now serves for it, after its handshake."""

    async def unload_adapter(self, run_id: str) -> None:
        """Abort the run's requests, remove its adapter from the engine, free its slot."""

    async def generate(self, requests: list[PoolRequest]) -> list[GroupResult]:
        """Every request, in one batch across runs; results in the order of `requests`."""

    async def pause(self, run_id: str, mode: PauseMode) -> None: ...

    async def resume(self, run_id: str) -> None: ...

    async def abort(self, run_id: str) -> list[GroupResult]: ...

    async def close(self) -> None: ...


class LanePool:
    """What the pool engines share: runs' lanes by id, admission, and request routing.
    Subclasses start the engine (`_start`), make a lane for a run in a free slot
    (`_new_lane`) and stop the engine (`_shutdown`); a lane's `close` takes it out."""

    name = "pool"
    needs_probe = True
    placeable = False
    batches_adapters = True

    ranks: tuple[int, ...] = (1,)  # the LoRA ranks the engine supports

    def __init__(
        self,
        spec: RunSpec,
        model_dir: str | Path,
        capacity: int | None = None,
        max_lora_rank: int | None = None,
    ):
        """`capacity` adapters (default `rollout.max_loras`) of rank up to `max_lora_rank`
        (default `spec.lora.r`, rounded up to one of the engine's `ranks`); `spec` gives
        what the runs share (model, dtype, seed, the engine's settings)."""
        self.spec, self.model_dir = spec, str(model_dir)
        self.capacity = capacity or spec.rollout.max_loras
        self.max_lora_rank = adapter_files.supported_rank(max_lora_rank or spec.lora.r, self.ranks)
        self.lanes: dict[str, RolloutBackend] = {}
        self._lora: dict[str, LoraSpec] = {}
        self._slots: dict[str, int] = {}  # run id → slot (1 … capacity)
        self._admitting = asyncio.Lock()
        self._closed = False
        self._start()

    # ---------------------------------------------------------------- hooks

    def _start(self) -> None:
        """Start the engine (or prepare to, for engines whose construction is awaited)."""

    async def _shutdown(self) -> None:
        raise NotImplementedError

    async def _new_lane(self, run_id: str, lora: LoraSpec, slot: int) -> RolloutBackend:
        raise NotImplementedError

    # ---------------------------------------------------------------- protocol

    def served_versions(self) -> dict[str, int]:
        return {run: lane.served_version for run, lane in self.lanes.items()}

    def check_admission(self, run_id: str, lora: LoraSpec) -> None:
        """Raise PoolAdmissionError unless `run_id` could join now."""
        require_admissible(self, run_id, lora, self.lanes)

    async def load_adapter(self, run_id: str, update: AdapterUpdate, lora: LoraSpec) -> int:
        lane = self.lanes.get(run_id)
        if lane is None:
            async with self._admitting:
                self.check_admission(run_id, lora)
                slot = min(set(range(1, self.capacity + 1)) - set(self._slots.values()))
                lane = await self._new_lane(run_id, lora, slot)
                self.lanes[run_id], self._lora[run_id], self._slots[run_id] = lane, lora, slot
            try:
                return await lane.load_adapter(update)
            except BaseException:
                await self.unload_adapter(run_id)  # a run joins with a served adapter or not at all
                raise
        if lora != self._lora[run_id]:
            raise ValueError(
                f"{self.name} pool: run {run_id!r}: the LoRA settings of a run are fixed when "
                "it joins (rank, alpha, target modules)"
            )
        return await lane.load_adapter(update)

    async def unload_adapter(self, run_id: str) -> None:
        lane = self._lane(run_id)
        async with self._admitting:
            await lane.close()  # a lane's close is its leaving: its adapter goes
            del self.lanes[run_id], self._lora[run_id], self._slots[run_id]

    async def generate(self, requests: list[PoolRequest]) -> list[GroupResult]:
        by_run: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            lane = self._lane(r.run_id)
            if r.version is not None and r.version != lane.served_version:
                raise RuntimeError(
                    f"{self.name} pool: request {r.group.request_id} names run {r.run_id!r} at "
                    f"adapter version {r.version}, but the engine serves version "
                    f"{lane.served_version} for it"
                )
            by_run.setdefault(r.run_id, []).append(i)
        # every lane's requests go to the engine at once: one batch across adapters
        outs = await asyncio.gather(
            *(
                self.lanes[run].generate([requests[i].group for i in idx])
                for run, idx in by_run.items()
            )
        )
        results: list[GroupResult | None] = [None] * len(requests)
        for idx, out in zip(by_run.values(), outs, strict=True):
            for i, res in zip(idx, out, strict=True):
                results[i] = res
        return results  # type: ignore[return-value]

    async def pause(self, run_id: str, mode: PauseMode) -> None:
        await self._lane(run_id).pause(mode)

    async def resume(self, run_id: str) -> None:
        await self._lane(run_id).resume()

    async def abort(self, run_id: str) -> list[GroupResult]:
        return await self._lane(run_id).abort()

    async def close(self) -> None:
        """Every run leaves (its requests aborted), then the engine stops."""
        if self._closed:
            return
        self._closed = True
        for lane in list(self.lanes.values()):
            await lane.close()
        await self._shutdown()

    def _lane(self, run_id: str) -> RolloutBackend:
        lane = self.lanes.get(run_id)
        if lane is None:
            known = ", ".join(sorted(self.lanes)) or "none"
            raise KeyError(
                f"{self.name} pool: no adapter loaded for run {run_id!r} (runs: {known})"
            )
        return lane


def require_admissible(engine: PoolEngine, run_id: str, lora: LoraSpec, admitted) -> None:
    """Raise PoolAdmissionError unless `run_id` could join `engine`, whose slots hold the
    runs `admitted`, now."""
    if lora.r > engine.max_lora_rank:
        raise PoolAdmissionError(
            f"{engine.name} pool: run {run_id!r} has lora.r={lora.r}, above the pool's "
            f"max LoRA rank {engine.max_lora_rank} (fixed when the engine started)"
        )
    if run_id not in admitted and len(admitted) >= engine.capacity:
        raise PoolAdmissionError(
            f"{engine.name} pool: run {run_id!r} cannot join: all {engine.capacity} adapter "
            f"slots are taken (runs {', '.join(sorted(admitted))}); unload one first"
        )
