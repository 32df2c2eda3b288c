"""The trainer's LoRA linear: PEFT's, which can also run several adapters in one forward,
each on its own block of rows (a pool's runs stepped together: policy.py).

Within `row_blocks(blocks)` each LoRA linear computes the base matmul over every row once,
then per block `base + B(A(dropout(x))) · scaling` with that block's adapter on its rows and
its own columns (the width its batch has alone; outside them, padding, no LoRA), so a run's
rows get exactly its adapter's output and its adapter's gradient comes from its rows only.
Dropout draws from the block's generator with the block's shape (`bernoulli_` as
`F.dropout` draws on the CPU), so on the CPU a run's masks are those of its step alone. The
blocks are split off and put back together (`split`, `cat`), not sliced and assigned in
place: each of those would cost a copy of the whole batch's activations or gradients per
run in backward. Outside `row_blocks`, and inside compiled code, it is PEFT's forward.

PEFT's own mixed-adapter batch (`adapter_names=`) is not used: it is refused in training
mode, draws dropout from the global stream over the padded width, and has no notion of a
run's columns. The class is installed through PEFT's custom-module hook (`lora_config`
in lora.py): the modules stay PEFT's, with PEFT's parameters, file keys and loading.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from peft.tuners.lora.layer import Linear as LoraLinear
from peft.tuners.lora.layer import LoraLayer


@dataclass(frozen=True)
class RowBlock:
    """A forward's rows `[at, at + rows)` of the batch (blocks follow each other and cover
    every row) under adapter `name` (None: the base model) on columns `[c0, c1)`."""

    name: str | None
    rows: int
    c0: int
    c1: int
    gen: torch.Generator | None = None  # its dropout stream (training mode)


_BLOCKS: ContextVar[list[RowBlock] | None] = ContextVar("paddock_row_blocks", default=None)


@contextlib.contextmanager
def row_blocks(blocks: list[RowBlock]):
    """The forwards run in this context compute each block under its own adapter."""
    token = _BLOCKS.set(blocks)
    try:
        yield
    finally:
        _BLOCKS.reset(token)


class RowsLinear(LoraLinear):
    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        blocks = None if torch.compiler.is_compiling() else _BLOCKS.get()
        if blocks is None:
            return super().forward(x, *args, **kwargs)
        result = self.base_layer(x, *args, **kwargs)
        if not any(b.name is not None and b.name in self.lora_A for b in blocks):
            return result
        dtype, width = result.dtype, x.shape[1]
        pieces = []
        sizes = [b.rows for b in blocks]
        for b, xb, base in zip(blocks, x.split(sizes), result.split(sizes), strict=True):
            if b.name is None or b.name not in self.lora_A or b.c1 <= b.c0:
                pieces.append(base)  # the base model, or not one of this run's targets
                continue
            lora_a, lora_b = self.lora_A[b.name], self.lora_B[b.name]
            whole = (b.c0, b.c1) == (0, width)
            xs = self._cast_input_dtype(xb if whole else xb[:, b.c0 : b.c1], lora_a.weight.dtype)
            drop = self.lora_dropout[b.name]
            if isinstance(drop, torch.nn.Dropout) and drop.training and drop.p > 0:
                keep = 1.0 - drop.p
                noise = torch.empty(xs.shape, dtype=xs.dtype, device=xs.device)
                noise.bernoulli_(keep, generator=b.gen)
                xs = xs * noise.div_(keep)
            if lora_b.bias is None:  # the scale on B's few weights, not on the activations
                delta = F.linear(lora_a(xs), lora_b.weight * self.scaling[b.name])
            else:
                delta = lora_b(lora_a(xs)) * self.scaling[b.name]
            if not whole:
                delta = F.pad(delta, (0, 0, b.c0, width - b.c1))
            pieces.append(base + delta)
        return torch.cat(pieces).to(dtype)


def splits_rows(model: torch.nn.Module, names: set[str]) -> bool:
    """Whether every LoRA layer of adapters `names` computes them per row block: a
    `RowsLinear`, unmerged, with none of PEFT's variants (DoRA and the like) for them."""
    for m in model.modules():
        mine = isinstance(m, LoraLayer) and names & set(m.lora_A.keys())
        if mine and (not isinstance(m, RowsLinear) or m.merged or names & set(m.lora_variant)):
            return False
    return True
