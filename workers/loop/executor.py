"""Where train steps run. The driver talks to an executor (`TrainerExecutor`, types.py),
never to the policy directly, so the Ray executor (trainer actors) and a pool's members
(workers/pool/members.py) reuse the same loop. This is the in-process one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import torch

from ..adapters.update import AdapterUpdate, adapter_probe
from ..policy import LoraPolicy, TrainSample, collate
from ..policy.adapter import Adapter
from ..policy.batch import TrainBatch
from .checkpoint import load_trainer, save_trainer


class LocalExecutor:
    """One adapter of a policy in this process (a run alone: the policy's own; every rank
    of a sharded policy runs one, in step). Train steps go to a thread so the async
    driver's rollout task keeps generating meanwhile."""

    # the published adapter on the trainer's device: an in-process engine copies it device
    # to device; what crosses to another host goes through the CPU there (TrainerActor)
    publish_on_device = True

    def __init__(self, policy: LoraPolicy, adapter: Adapter | None = None):
        self.policy = policy
        self.adapter = adapter or policy.adapter

    @property
    def adapter_version(self) -> int:
        return self.adapter.version

    async def train_step(self, samples: list[TrainSample]) -> dict[str, float]:
        batch = collate(samples, self.policy.tokenizer.pad_token_id)
        return await asyncio.to_thread(self._train_step, batch)

    def _train_step(self, batch: TrainBatch) -> dict[str, float]:
        return self.policy.train_step(self.adapter, batch)

    async def adapter_update(self, with_probe: bool = True) -> AdapterUpdate:
        return self.publish(with_probe)

    def publish(self, with_probe: bool = True) -> AdapterUpdate:
        """The adapter as an engine loads it, labelled with its version, kept for the
        stale-token check (version_check.py); with the handshake's probe under it."""
        policy, adapter = self.policy, self.adapter
        if self.publish_on_device:
            tensors = policy.adapter_snapshot(adapter)
        else:
            tensors = policy.adapter_tensors(adapter)
        adapter.history.record(adapter.version, tensors)
        probe = None
        if with_probe:
            probe = adapter_probe(policy.activate(adapter), len(policy.tokenizer))
        return AdapterUpdate(adapter.version, tensors=tensors, probe=probe)

    async def save(self, out: Path) -> None:
        save_trainer(out, self.policy, self.adapter)

    async def load(self, src: Path) -> None:
        load_trainer(src, self.policy, self.adapter)


class StreamExecutor(LocalExecutor):
    """The in-process executor, its train steps issued on `stream`. Each step waits for its
    kernels before it returns, so that the adapter the driver then publishes (copied on
    the default stream) is the stepped one."""

    def __init__(self, policy: LoraPolicy, stream: torch.cuda.Stream | None):
        super().__init__(policy)
        self.stream = stream

    def _train_step(self, batch: TrainBatch) -> dict[str, float]:
        if self.stream is None:
            return super()._train_step(batch)
        with torch.cuda.stream(self.stream):
            out = super()._train_step(batch)
        self.stream.synchronize()
        return out
