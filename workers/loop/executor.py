"""Where train steps run. The driver talks to an executor, never to the policy directly, so
the Ray executor (trainer actors) reuses the same loop."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any, Protocol

import torch

from ..policy import LoraPolicy, TrainSample, collate
from ..policy.batch import TrainBatch
from ..rollout.base import AdapterProbe, AdapterUpdate
from .version_check import AdapterHistory, merge, stale_token_sums


class TrainerExecutor(Protocol):
    @property
    def adapter_version(self) -> int: ...

    async def train_step(self, samples: list[TrainSample]) -> dict[str, float]: ...

    async def adapter_update(self, with_probe: bool = True) -> AdapterUpdate:
        """The current adapter as tensors, labelled with its version; with the version
        handshake's probe (a trainer forward) only for engines that check it."""

    async def save(self, out: Path) -> None:
        """Adapter (PEFT directory), optimizer and RNG states into `out`."""

    async def load(self, src: Path) -> None: ...


class LocalExecutor:
    """Runs the policy in this process; train steps go to a thread so the async driver's
    rollout task keeps generating meanwhile."""

    def __init__(self, policy: LoraPolicy):
        self.policy = policy
        spec = policy.spec
        self.history = AdapterHistory(spec.async_.max_staleness if spec.async_.enabled else 0)

    @property
    def adapter_version(self) -> int:
        return self.policy.adapter_version

    async def train_step(self, samples: list[TrainSample]) -> dict[str, float]:
        batch = collate(samples, self.policy.tokenizer.pad_token_id)
        return await asyncio.to_thread(self._train_step, batch)

    def _train_step(self, batch: TrainBatch) -> dict[str, float]:
        limit = self.policy.spec.train.mult_prob_error_samples
        if limit == 0:
            return self.policy.train_step(batch)
        # Before the step, while the adapter the current-version tokens came from is loaded.
        stale = stale_token_sums(self.policy, batch, self.history, limit)
        current = (batch.versions == self.policy.adapter_version).to(batch.mask.dtype)
        same_tokens = (batch.mask * current).sum().item()
        return merge(self.policy.train_step(batch), same_tokens, stale)

    async def adapter_update(self, with_probe: bool = True) -> AdapterUpdate:
        # on the trainer's device: an in-process engine copies it device to device; what
        # crosses to another host goes through the CPU there (TrainerActor.publish)
        tensors = self.policy.adapter_snapshot()
        self.history.record(self.policy.adapter_version, tensors)
        probe = adapter_probe(self.policy.model, len(self.policy.tokenizer)) if with_probe else None
        return AdapterUpdate(self.policy.adapter_version, tensors=tensors, probe=probe)

    async def save(self, out: Path) -> None:
        self.policy.save_adapter(out / "adapter")
        torch.save(self.policy.optimizer_state(), out / "optimizer.pt")
        torch.save(_rng_state(), out / "rng.pt")

    async def load(self, src: Path) -> None:
        self.policy.load_adapter_dir(src / "adapter")
        self.policy.load_optimizer_state(torch.load(src / "optimizer.pt", weights_only=True))
        _set_rng_state(torch.load(src / "rng.pt", weights_only=False))


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


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
