"""How a `LoraPolicy` spreads over processes: the strategy the policy holds.

The policy owns the model, the adapters and the step; the strategy owns what differs
between one process and data-parallel ranks: which share of a batch this process trains on,
how its gradients and metrics become the whole batch's, how an adapter's tensors and
optimizer state are read and written (plain tensors here; DTensor shards under FSDP2, in
fsdp.py), and which process writes files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch

from ..adapters import lora as lora_io
from .batch import TrainBatch

if TYPE_CHECKING:
    from .adapter import Adapter


class Parallelism(Protocol):
    # Each process's loss is multiplied by this before backward (FSDP's reduce-scatter
    # averages sharded gradients, so sharded ranks scale by the world size to sum them).
    loss_scale: float
    # Ranks that gather sharded layers in every forward must all run the same forwards: the
    # prompt-sharing forward is then taken whether or not a micro-batch shares a prompt.
    uniform_forward: bool
    # Whether this process writes a checkpoint's files (every process gathers for them).
    writes_files: bool

    def prepare(self, model: torch.nn.Module) -> None:
        """Called once the model is built, before its adapters' optimizers are."""

    def part(self, batch: TrainBatch, micro_batch_size: int) -> tuple[TrainBatch, int]:
        """This process's share of `batch` and how many micro-batches every process runs."""
        ...

    def reduce_metrics(
        self, sums: dict[str, float], weights: dict[str, float]
    ) -> tuple[dict[str, float], dict[str, float]]:
        """Each process's metric sums and weights → the whole batch's."""
        ...

    def sync_grads(self, params: list[torch.nn.Parameter]) -> None:
        """Make this process's gradients the whole batch's."""

    def adapter_tensors(self, adapter: Adapter) -> dict[str, torch.Tensor]: ...

    def adapter_snapshot(
        self, adapter: Adapter, device: torch.device
    ) -> dict[str, torch.Tensor]: ...

    def load_adapter_tensors(self, adapter: Adapter, tensors: dict[str, torch.Tensor]) -> None: ...

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict: ...

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None: ...


class OneProcess:
    """One process trains on the whole batch: nothing to split, reduce or gather."""

    loss_scale = 1.0
    uniform_forward = False
    writes_files = True

    def prepare(self, model: torch.nn.Module) -> None:
        pass

    def part(self, batch: TrainBatch, micro_batch_size: int) -> tuple[TrainBatch, int]:
        return batch, -(-len(batch) // micro_batch_size)

    def reduce_metrics(
        self, sums: dict[str, float], weights: dict[str, float]
    ) -> tuple[dict[str, float], dict[str, float]]:
        return sums, weights

    def sync_grads(self, params: list[torch.nn.Parameter]) -> None:
        pass

    def adapter_tensors(self, adapter: Adapter) -> dict[str, torch.Tensor]:
        return lora_io.move_tensors(adapter.index, torch.device("cpu"))

    def adapter_snapshot(self, adapter: Adapter, device: torch.device) -> dict[str, torch.Tensor]:
        # one device-side copy on a GPU: what an engine in this process or on this host
        # loads without a trip through the CPU
        return lora_io.move_tensors(adapter.index, device)

    def load_adapter_tensors(self, adapter: Adapter, tensors: dict[str, torch.Tensor]) -> None:
        lora_io.copy_into(adapter.index, tensors)

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict:
        return optimizer.state_dict()

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        optimizer.load_state_dict(state)
