"""The pool engine in a child process of the pool (`PoolDriver(engine_process=...)`).

Why: the pool's trainer and its engine's decoding are both loops of thousands of small torch
ops, each holding the GIL for its Python dispatch. In one process they take turns on one
interpreter, so a pool on the CPU used one core however many it had (bench/pool_cpu.py:
CPU seconds about equal to the wall-clock, on two cores). In a child process the engine has
an interpreter of its own: the trainer steps some runs while the engine decodes others.

The proxy keeps the pool engine protocol (workers/rollout/pool_engine.py) over the
rollout's engine channel (workers/rollout/process_backend.py): each call crosses a pipe,
several may be in flight at once (a run's pause while another run's generate decodes),
adapter tensors cross in shared memory. What the driver reads synchronously (the slots,
the rank, the versions served) is kept here: the fixed values from the child's start, each
run's served version from the replies to its loads. The child dies with the pool, and a
child that dies fails every pending call (each run's loop then fails with that error).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from ..adapters.update import AdapterUpdate
from ..rollout.base import GroupResult, PauseMode
from ..rollout.pool_engine import PoolRequest, require_admissible
from ..rollout.process_backend import EngineChannel, serve
from ..rollout.registry import make_pool_engine
from ..spec import LoraSpec, RunSpec, parse_spec


class ProcessPoolEngine:
    """A pool engine (`make_pool_engine`'s) in a child process, behind the same protocol."""

    placeable = True  # the device is handed to the engine the child builds

    def __init__(
        self,
        spec: RunSpec,
        model_dir: str | Path,
        capacity: int | None,
        max_lora_rank: int | None,
        device: torch.device,
    ):
        args = (spec.model_dump(mode="json", by_alias=True), str(model_dir), capacity,
                max_lora_rank, device)  # fmt: skip
        what = f"pool engine process ({spec.rollout.backend})"
        start = "fork" if fork_is_safe(device) else "spawn"
        self._channel = EngineChannel(_serve, args, what, start)
        hello = self._channel.hello
        self.name, self.needs_probe = hello["name"], hello["needs_probe"]
        self.batches_adapters = hello["batches_adapters"]
        self.capacity, self.max_lora_rank = hello["capacity"], hello["max_lora_rank"]
        self._versions: dict[str, int] = {}  # the runs served, each at its acknowledged version
        self._joining: set[str] = set()  # runs whose first load is on its way

    @property
    def pid(self) -> int | None:
        return self._channel.pid

    @property
    def exit_cpu_s(self) -> float | None:
        """The engine process's CPU seconds, once it has closed."""
        return self._channel.exit_cpu_s

    def served_versions(self) -> dict[str, int]:
        return dict(self._versions)

    def check_admission(self, run_id: str, lora: LoraSpec) -> None:
        require_admissible(self, run_id, lora, self._versions.keys() | self._joining)

    async def load_adapter(self, run_id: str, update: AdapterUpdate, lora: LoraSpec) -> int:
        first = run_id not in self._versions
        if first:
            self._joining.add(run_id)
        try:
            version = await self._channel.call("load_adapter", run_id, update, lora)
        except BaseException:
            if first:  # the engine unloaded it: a run joins with a served adapter or not at all
                self._versions.pop(run_id, None)
            raise
        finally:
            self._joining.discard(run_id)
        self._versions[run_id] = version
        return version

    async def unload_adapter(self, run_id: str) -> None:
        try:
            await self._channel.call("unload_adapter", run_id)
        finally:
            self._versions.pop(run_id, None)

    async def generate(self, requests: list[PoolRequest]) -> list[GroupResult]:
        return await self._channel.call("generate", requests)

    async def pause(self, run_id: str, mode: PauseMode) -> None:
        await self._channel.call("pause", run_id, mode)

    async def resume(self, run_id: str) -> None:
        await self._channel.call("resume", run_id)

    async def abort(self, run_id: str) -> list[GroupResult]:
        return await self._channel.call("abort", run_id)

    async def close(self) -> None:
        await self._channel.close()
        self._versions.clear()


def _serve(conn, spec_data: dict, model_dir: str, capacity: int | None,
           max_lora_rank: int | None, device: torch.device) -> None:  # fmt: skip
    def build():
        spec = parse_spec(spec_data)
        if spec.train.threads:
            torch.set_num_threads(spec.train.threads)
        return make_pool_engine(spec, model_dir, capacity, max_lora_rank, device)

    def describe(engine) -> dict:
        return {"name": engine.name, "needs_probe": engine.needs_probe,
                "batches_adapters": engine.batches_adapters, "capacity": engine.capacity,
                "max_lora_rank": engine.max_lora_rank}  # fmt: skip

    serve(conn, build, describe)


def fork_is_safe(device: torch.device) -> bool:
    """Whether the engine process may be forked rather than spawned: an engine on the CPU,
    and no CUDA state in this process (a forked child cannot use CUDA that its parent had
    initialised). Forked, the child has every module of the pool already imported: it starts
    in a fraction of a second, where a spawned one imports torch, transformers and PEFT anew
    (several seconds on a small machine; a pool of short CPU runs finishes in less).

    The pool's process may have other threads when it forks (a pool job's reporters, the
    event loop's executor, tqdm's monitor); the child has only the forking one. It runs the
    engine alone (torch, the tokenizer, its own pipe) and takes none of those threads' locks
    but the interpreter's, which CPython resets in a forked child; a lock of the standard
    streams held by another thread at that instant would stall the child's first write to
    them (not seen in the tests, which fork under reporters and an HTTP server's thread).
    `PoolDriver(engine_process=False)` keeps the engine in the pool's process."""
    # kombu's after-fork handler (a Celery client in this process) closes its inherited
    # Redis connections in the child with a blocking read on the parent's socket: the
    # child hung before its engine started (seen in the full suite's process)
    return device.type == "cpu" and not torch.cuda.is_initialized() and "kombu" not in sys.modules
