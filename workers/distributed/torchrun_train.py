"""A run on one multi-GPU host without Ray:

    python -m torch.distributed.run --nproc-per-node 4 -m workers.distributed.torchrun_train \\
        SPEC.yaml --out DIR [--set key.path=value ...]

Every rank holds the sharded trainer (`ShardedLoraPolicy`; `LoraPolicy` with one rank) on
its own GPU. Rank 0 runs the driver, the same `run_training` as `paddock train`, through a
`CollectiveExecutor`: each executor call (train_step, adapter_update, save, load) is first
broadcast with its arguments, and the other ranks, waiting in `follow`, make the same call,
so the collectives inside meet. The engines are `resources.rollout_replicas` child
processes (`EngineProcess`) on the GPUs after the trainer's, or on the trainer's own where
none is left over (`engine_devices`), behind one `ReplicaSet` (on a host without GPUs, on
the CPU: how the tests run it).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..adapters.update import AdapterUpdate
from ..loop.events import early_log
from ..loop.executor import LocalExecutor
from ..loop.setup import model_dir_for, run_training
from ..policy import LoraPolicy, TrainSample
from ..policy.fsdp import ShardedLoraPolicy
from ..rollout.base import RolloutBackend
from ..rollout.engine_process import EngineProcess
from ..rollout.replicas import ReplicaSet
from ..spec import RunSpec, load_spec
from .process_group import init_from_env

_STOP = "stop"


def _broadcast(command: tuple[str, Any] | None) -> tuple[str, Any]:
    box = [command]
    dist.broadcast_object_list(box, src=0)
    return box[0]


class CollectiveExecutor:
    """Rank 0's executor: every call is announced to the other ranks, then made here."""

    def __init__(self, inner: LocalExecutor):
        self.inner = inner

    @property
    def adapter_version(self) -> int:
        return self.inner.adapter_version

    async def train_step(self, samples: list[TrainSample]) -> dict[str, float]:
        _broadcast(("train_step", samples))
        return await self.inner.train_step(samples)

    async def adapter_update(self, with_probe: bool = True) -> AdapterUpdate:
        _broadcast(("adapter_update", with_probe))
        return await self.inner.adapter_update(with_probe)

    async def save(self, out: Path) -> None:
        _broadcast(("save", out))
        await self.inner.save(out)

    async def load(self, src: Path) -> None:
        _broadcast(("load", src))
        await self.inner.load(src)

    def stop(self) -> None:
        _broadcast((_STOP, None))


async def follow(executor: LocalExecutor) -> None:
    """Ranks 1…N−1: make each call rank 0 announces, until it says stop."""
    while True:
        method, arg = _broadcast(None)
        if method == _STOP:
            return
        await getattr(executor, method)(arg)


def engine_devices(spec: RunSpec, world: int, gpus: int) -> list[torch.device]:
    """Where each of the `resources.rollout_replicas` engines goes on a host of `gpus` GPUs
    whose first `world` hold the trainer's ranks (none if the trainer is on the CPU): the
    GPUs after the trainer's, one a replica in turn; with none left over, the trainer's own
    (on one GPU, trainer and engine share it, as `local_devices` in workers/loop/setup.py
    puts them); the CPU without GPUs or where the spec asks for none."""
    n = spec.resources.rollout_replicas
    if spec.resources.rollout_gpus <= 0 or gpus <= 0:
        return [torch.device("cpu")] * n
    taken = min(world, gpus) if spec.resources.trainer_gpus > 0 else 0
    pool = list(range(taken, gpus)) or list(range(gpus))
    return [torch.device("cuda", pool[i % len(pool)]) for i in range(n)]


def make_engines(spec: RunSpec, model_dir: Path, world: int) -> RolloutBackend:
    devices = engine_devices(spec, world, torch.cuda.device_count())
    engines = [EngineProcess(spec, model_dir, device) for device in devices]
    return engines[0] if len(engines) == 1 else ReplicaSet(engines)


async def run(spec: RunSpec, out: Path, progress: bool) -> None:
    use_cuda = spec.resources.trainer_gpus > 0 and torch.cuda.is_available()
    rank, world = init_from_env(use_cuda)
    torch.manual_seed(spec.seed)
    # a tiny model's build (or the wait behind another rank's) said once, by rank 0
    model_dir = model_dir_for(spec, log=early_log(None, progress) if rank == 0 else None)
    device = torch.device("cuda", torch.cuda.current_device()) if use_cuda else None
    if world > 1:
        policy: LoraPolicy = ShardedLoraPolicy(spec, model_dir, device)
    else:
        policy = LoraPolicy(spec, model_dir, device)
    executor = LocalExecutor(policy)
    try:
        if rank != 0:
            await follow(executor)
            return
        leader = CollectiveExecutor(executor)
        try:
            outcome = await run_training(
                spec,
                out,
                executor=leader,
                backend=make_engines(spec, model_dir, world),
                progress=progress,
            )
            print(f"{outcome.state} at step {outcome.step}", flush=True)
        finally:
            leader.stop()
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="a run under torch.distributed.run, without Ray")
    ap.add_argument("spec", help="YAML or JSON run spec")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    spec = load_spec(args.spec, args.overrides)
    asyncio.run(run(spec, args.out, progress=not args.no_progress))


if __name__ == "__main__":
    main()
