"""The LoRA policy sharded with FSDP2 (`fully_shard`, DTensor) over the ranks of the default
process group (set up by workers/distributed/process_group.py).

Each decoder layer is one FSDP unit and the transformer body (embeddings, final norm) the
root unit; the LoRA matrices live inside the layers, so they are sharded with the base.
The frozen LM head stays a plain tensor on every rank: `token_logprobs` multiplies by its
weight directly (chunked, recomputed in backward), outside any module's forward hooks.

Every rank trains on the whole batch, so FSDP's averaged gradients equal the single-process
ones: this buys memory (parameters, gradients and optimizer state sharded), not throughput.

The adapter leaves the group one LoRA tensor at a time (`full_tensor()` of that tensor
only); the base model is never gathered whole on any rank.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist
from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from ..spec import RunSpec
from . import lora as lora_io
from .policy import LoraPolicy


class ShardedLoraPolicy(LoraPolicy):
    def __init__(self, spec: RunSpec, model_dir: str | Path, device: torch.device | None = None):
        if not dist.is_initialized():
            raise RuntimeError("ShardedLoraPolicy needs an initialised torch.distributed group")
        super().__init__(spec, model_dir, device)
        body = self.model.get_base_model().model
        for layer in body.layers:
            fully_shard(layer)
        fully_shard(body)
        # fully_shard swapped the parameters for DTensors: the optimizer (no state yet) must
        # hold the new ones
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        (group,) = self.optimizer.param_groups
        group["params"] = self.params

    @property
    def rank(self) -> int:
        return dist.get_rank()

    # ---------------------------------------------------------------- adapter I/O

    def adapter_tensors(self) -> dict[str, torch.Tensor]:
        """Full LoRA tensors on every rank, gathered one at a time (a collective: every rank
        calls it, in the same key order)."""
        state = get_peft_model_state_dict(self.model, adapter_name=lora_io.ADAPTER_NAME)
        return {k: _full(v).detach().to("cpu", copy=True).contiguous() for k, v in state.items()}

    def load_adapter_tensors(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        current = get_peft_model_state_dict(self.model, adapter_name=lora_io.ADAPTER_NAME)
        sharded = {}
        for k, cur in current.items():
            full = tensors[k].to(cur.device, cur.dtype)
            sharded[k] = (
                distribute_tensor(full, cur.device_mesh, cur.placements)
                if isinstance(cur, DTensor)
                else full
            )
        set_peft_model_state_dict(self.model, sharded, adapter_name=lora_io.ADAPTER_NAME)
        self.adapter_version = version

    def save_adapter(self, out: str | Path) -> Path:
        """A PEFT directory like LoraPolicy's, written by rank 0 (every rank gathers)."""
        tensors = self.adapter_tensors()
        out = Path(out)
        if self.rank == 0:
            out.mkdir(parents=True, exist_ok=True)
            self.model.peft_config[lora_io.ADAPTER_NAME].save_pretrained(str(out))
            lora_io.write_adapter_file(tensors, out / "adapter_model.safetensors")
            (out / lora_io.VERSION_FILE).write_text(
                json.dumps({"adapter_version": self.adapter_version})
            )
        return out

    def optimizer_state(self) -> dict:
        """The full optimizer state (LoRA-sized), on every rank."""
        return get_optimizer_state_dict(
            self.model, self.optimizer, options=StateDictOptions(full_state_dict=True)
        )

    def load_optimizer_state(self, state: dict) -> None:
        set_optimizer_state_dict(
            self.model,
            self.optimizer,
            optim_state_dict=state,
            options=StateDictOptions(full_state_dict=True),
        )


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t
