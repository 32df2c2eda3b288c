"""The actors of a Ray run. State lives here, one engine or one trainer rank per actor; the
driver (workers.loop.Driver, the same one `paddock train` runs) reaches them through
`RayTrainerExecutor` and `RayRolloutBackend`.

Both are async actors: a rollout actor must take `pause`/`load_adapter` while a `generate`
is in flight, and the blocking work already runs in threads (the backends' and
`LocalExecutor`'s `asyncio.to_thread`)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import ray
import torch

from ..adapters.lora import move_tensors
from ..adapters.update import AdapterProbe, AdapterUpdate
from ..loop.executor import LocalExecutor
from ..loop.setup import model_dir_for
from ..policy import LoraPolicy, TrainSample
from ..policy.fsdp import ShardedLoraPolicy
from ..rollout import GroupRequest, GroupResult, PauseMode, make_backend
from ..spec import RunSpec
from .process_group import init_process_group


def _threads(spec: RunSpec, cpus: float) -> None:
    torch.set_num_threads(spec.train.threads or max(1, int(cpus)))


def _where() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname()}


class TrainerActor:
    """One trainer rank. With one rank it is `LocalExecutor(LoraPolicy)` in another process;
    with several, the ranks form one torch.distributed group and the policy is FSDP2-sharded
    (workers/policy/fsdp.py)."""

    def __init__(self, spec: RunSpec, rank: int, world: int, cpus: float):
        _threads(spec, cpus)
        self.spec, self.rank, self.world = spec, rank, world
        self.executor: LocalExecutor

    def rendezvous(self) -> str:
        """On rank 0: the address:port where the group meets (a free port on its node)."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return f"{ray.util.get_node_ip_address()}:{port}"

    def build(self, master: str | None) -> None:
        """Join the process group (several ranks) and load the policy."""
        torch.manual_seed(self.spec.seed)
        model_dir = model_dir_for(self.spec)
        if self.world > 1:
            init_process_group(master, self.rank, self.world)
            self.executor = LocalExecutor(ShardedLoraPolicy(self.spec, model_dir))
        else:
            self.executor = LocalExecutor(LoraPolicy(self.spec, model_dir))

    def where(self) -> dict[str, Any]:
        return _where()

    def adapter_version(self) -> int:
        return self.executor.adapter_version

    def parameter_layout(self) -> dict[str, tuple[str, list[int], list[int]]]:
        """name → (tensor type, local shape, full shape) of every parameter of this rank:
        what a sharding check (or a curious operator) looks at."""
        from torch.distributed.tensor import DTensor

        out = {}
        for name, p in self.executor.policy.model.named_parameters():
            local = p.to_local() if isinstance(p, DTensor) else p
            kind = "DTensor" if isinstance(p, DTensor) else "Tensor"
            out[name] = (kind, list(local.shape), list(p.shape))
        return out

    async def train_step(self, samples: list[TrainSample]) -> tuple[int, dict[str, float]]:
        metrics = await self.executor.train_step(samples)
        return self.executor.adapter_version, metrics

    async def publish(
        self, with_probe: bool = True
    ) -> tuple[int, list[ray.ObjectRef] | None, AdapterProbe | None]:
        """Put the adapter in the object store once; every rollout actor reads that one copy.
        Every rank takes part (gathering shards is a collective); rank 0 returns the ref,
        in a list so that Ray hands it over unresolved, and the handshake's probe."""
        update = await self.executor.adapter_update(with_probe)
        if self.rank != 0:
            return update.version, None, None
        tensors = move_tensors(update.tensors, torch.device("cpu"))  # the object store's
        return update.version, [ray.put(tensors)], update.probe

    async def save(self, out: str) -> None:
        await self.executor.save(Path(out))

    async def load(self, src: str) -> int:
        await self.executor.load(Path(src))
        return self.executor.adapter_version


class RolloutActor:
    """One engine (any backend, by `rollout.backend`) behind the RolloutBackend protocol."""

    def __init__(self, spec: RunSpec, cpus: float):
        _threads(spec, cpus)
        self.backend = make_backend(spec, model_dir_for(spec))

    def where(self) -> dict[str, Any]:
        return _where()

    async def generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        return await self.backend.generate(requests)

    async def load_adapter(
        self, version: int, tensors: dict[str, torch.Tensor], probe: AdapterProbe | None
    ) -> int:
        """`tensors` arrives resolved from the trainer's one object-store copy. Returns the
        version the engine acknowledged."""
        return await self.backend.load_adapter(AdapterUpdate(version, tensors, probe=probe))

    async def pause(self, mode: PauseMode) -> None:
        await self.backend.pause(mode)

    async def resume(self) -> None:
        await self.backend.resume()

    async def abort(self) -> list[GroupResult]:
        return await self.backend.abort()

    async def close(self) -> None:
        await self.backend.close()
