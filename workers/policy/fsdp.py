"""The LoRA policy sharded with FSDP2 (`fully_shard`, DTensor) over the ranks of the default
process group (set up by workers/distributed/process_group.py).

Each decoder layer is one FSDP unit and the transformer body (embeddings, final norm) the
root unit: the frozen base is sharded. The LoRA matrices (the only trained weights, a few
hundred MB with their Adam state even for an 8B base) are by default replicated on every
rank, outside FSDP (`ignored_params`): the optimizer then steps plain tensors, as on one
GPU, instead of paying DTensor's Python dispatch per tensor and per op (bench/gpu/multi.py:
2 GPUs over 1 rose from ... to ...). `shard_lora=True` shards them with the base instead.
The frozen LM head stays a plain tensor on every rank: `token_logprobs` multiplies by its
weight directly (chunked, recomputed in backward), outside any module's forward hooks.

Data parallel as well as sharded: each rank trains on its own contiguous share of the batch.
Loss denominators are the whole batch's (AggNorm), so the ranks' losses add up to the
single-process loss and their gradients, summed, to its gradient: replicated LoRA gradients
are summed in one all-reduce; sharded ones are averaged by FSDP's reduce-scatter, so each
rank's loss is then scaled by the world size. The step's metrics are added up across ranks.
The base model is never gathered whole on any rank.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from ..adapters.packed import PackedTensors
from ..grpo import ADDITIVE_METRICS
from ..shares import contiguous_shares
from ..spec import RunSpec
from .batch import TrainBatch
from .policy import LoraPolicy

if TYPE_CHECKING:
    from .adapter import Adapter


class ShardedLoraPolicy(LoraPolicy):
    """A `LoraPolicy` that holds the FSDP2 strategy below: the policy itself is unchanged."""

    def __init__(
        self,
        spec: RunSpec,
        model_dir: str | Path,
        device: torch.device | None = None,
        shard_lora: bool = False,
    ):
        if not dist.is_initialized():
            raise RuntimeError("ShardedLoraPolicy needs an initialised torch.distributed group")
        super().__init__(spec, model_dir, device, parallel=FsdpParallel(shard_lora))


class FsdpParallel:
    """Data parallel over the ranks of the default process group, the base sharded."""

    # Sharded ranks must run the same forwards (each gathers the layers).
    uniform_forward = True

    def __init__(self, shard_lora: bool = False):
        self.shard_lora = shard_lora
        # replicated LoRA gradients are summed by one all-reduce; sharded ones averaged by
        # FSDP's reduce-scatter, so each rank's loss is scaled by the world size
        self.loss_scale = float(dist.get_world_size()) if shard_lora else 1.0

    def prepare(self, model: torch.nn.Module) -> None:
        self.model = model
        trained = {p for p in model.parameters() if p.requires_grad}
        ignored = None if self.shard_lora else trained
        body = model.get_base_model().model
        # The base is frozen, so a layer's gathered weights are kept from its forward to its
        # backward (one unsharded copy of the model a rank at the peak) rather than gathered
        # again: the backward then waits on no collective but the LoRA gradients' reduce.
        for layer in body.layers:
            fully_shard(layer, reshard_after_forward=False, ignored_params=ignored)
        fully_shard(body, reshard_after_forward=False, ignored_params=ignored)
        # a forward with no backward to follow (π_old, the KL base, the version probe, the
        # staleness check) gives its gathered weights back at once
        body.register_forward_hook(lambda *_: None if torch.is_grad_enabled() else self.reshard())

    def reshard(self) -> None:
        """Back to shards after a forward that no backward follows (layers keep their
        gathered weights until their backward): before the adapter is written, and so that
        no-grad passes do not hold a whole copy of the model."""
        for module in self.model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()

    # ---------------------------------------------------------------- data parallel

    def part(self, batch: TrainBatch, micro_batch_size: int) -> tuple[TrainBatch, int]:
        start, end = contiguous_shares(len(batch), dist.get_world_size())[dist.get_rank()]
        most = -(-len(batch) // dist.get_world_size())  # the largest share
        return batch.slice(start, end), max(1, -(-most // micro_batch_size))

    def reduce_metrics(
        self, sums: dict[str, float], weights: dict[str, float]
    ) -> tuple[dict[str, float], dict[str, float]]:
        gathered: list[tuple[dict, dict]] = [None] * dist.get_world_size()  # type: ignore[list-item]
        dist.all_gather_object(gathered, (dict(sums), dict(weights)))
        out_s: dict[str, float] = defaultdict(float)
        out_w: dict[str, float] = defaultdict(float)
        for s, w in gathered:
            for k, v in s.items():
                out_s[k] += v
                # additive metrics (counts) carry weight 1: summed, not averaged
                out_w[k] = 1.0 if k in ADDITIVE_METRICS else out_w[k] + w[k]
        return out_s, out_w

    def sync_grads(self, params: list[torch.nn.Parameter]) -> None:
        if self.shard_lora:
            return  # FSDP reduce-scattered them during the backward
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        packed = PackedTensors.pack({str(i): g for i, g in enumerate(grads)})
        for flat in packed.buffers.values():  # one all-reduce per dtype
            dist.all_reduce(flat)
        summed = packed.unpack()
        for i, p in enumerate(params):
            p.grad = summed[str(i)]

    # ---------------------------------------------------------------- adapter I/O

    @property
    def writes_files(self) -> bool:
        return dist.get_rank() == 0

    def adapter_tensors(self, adapter: Adapter) -> dict[str, torch.Tensor]:
        """Full LoRA tensors on every rank, gathered one at a time (a collective: every rank
        calls it, in the same key order)."""
        state = get_peft_model_state_dict(self.model, adapter_name=adapter.name)
        return {k: _full(v).detach().to("cpu", copy=True).contiguous() for k, v in state.items()}

    def adapter_snapshot(self, adapter: Adapter, device: torch.device) -> dict[str, torch.Tensor]:
        return self.adapter_tensors(adapter)  # gathered tensor by tensor, to the CPU

    def load_adapter_tensors(self, adapter: Adapter, tensors: dict[str, torch.Tensor]) -> None:
        self.reshard()  # write into the shards, not into gathered copies about to be dropped
        current = get_peft_model_state_dict(self.model, adapter_name=adapter.name)
        sharded = {}
        for k, cur in current.items():
            full = tensors[k].to(cur.device, cur.dtype)
            sharded[k] = (
                distribute_tensor(full, cur.device_mesh, cur.placements)
                if isinstance(cur, DTensor)
                else full
            )
        set_peft_model_state_dict(self.model, sharded, adapter_name=adapter.name)

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict:
        """The full optimizer state (LoRA-sized), on every rank."""
        return get_optimizer_state_dict(
            self.model, optimizer, options=StateDictOptions(full_state_dict=True)
        )

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        set_optimizer_state_dict(
            self.model,
            optimizer,
            optim_state_dict=state,
            options=StateDictOptions(full_state_dict=True),
        )


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t
