"""Where train steps run. The driver talks to an executor, never to the policy directly, so
the Ray executor (trainer actors) and a pool's members (workers/pool/members.py) reuse the
same loop."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Protocol

import torch

from ..policy import LoraPolicy, TrainSample, collate
from ..policy.adapter import Adapter
from ..policy.batch import TrainBatch
from ..rollout.base import AdapterProbe, AdapterUpdate
from .checkpoint import load_trainer, save_trainer


class TrainerExecutor(Protocol):
    @property
    def adapter_version(self) -> int: ...

    async def train_step(self, samples: list[TrainSample]) -> dict[str, float]: ...

    async def adapter_update(self, with_probe: bool = True) -> AdapterUpdate:
        """The current adapter as tensors, labelled with its version; with the version
        handshake's probe (a trainer forward) only for engines that check it."""

    async def save(self, out: Path) -> None:
        """The trainer's part of a checkpoint into `out` (loop/checkpoint.py)."""

    async def load(self, src: Path) -> None: ...


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


@torch.no_grad()
def adapter_probe(model: torch.nn.Module, vocab_size: int, length: int = 16) -> AdapterProbe:
    """The trainer's side of the version handshake: logprobs (temperature 1, eval mode) of a
    fixed token sequence that depends only on the vocabulary size."""
    ids = [(7 * i + 3) % vocab_size for i in range(length)]
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        # use_cache=False: a KV cache would be a guard per layer under train.compile (each
        # compiled layer reads its own slot of it) and recompile every layer
        ids_t = torch.tensor([ids], device=device)
        logits = model(input_ids=ids_t, use_cache=False).logits[0].float()  # [L, V]
    finally:
        model.train(was_training)
    lp = torch.log_softmax(logits[:-1], dim=-1).gather(
        1, torch.tensor(ids[1:], device=device)[:, None]
    )
    half = length // 2
    return AdapterProbe(ids[:half], ids[half:], lp[half - 1 :, 0].tolist())
