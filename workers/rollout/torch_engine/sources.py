"""Step sources: what computes a decode batch's logits for the decode loop (loop.py).

A source holds the batch's KV cache, one row a batch position. The loop tells it which rows
to prefill into which slots (`prefill`), to advance every live row by one token (`step`), to
rebuild the live rows' cache from their whole sequences (`recompute`, after an adapter
change), to drop finished rows (`compact`) or to stop advancing finished rows that keep
their slots (`retire`). Each row comes with its adapter slot (None: the engine's one adapter),
for a source that decodes rows of several adapters in one batch.

- `CachedForward`: the PEFT model's own forward and its dynamic KV cache (any model).
- `StaticSource`: the static decoder of static_decode.py (a preallocated cache, a CUDA graph a
  step on a GPU), whose freed slots take new groups while the other rows decode on.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor, nn

from ...policy.batch import left_pad
from ...spec import TorchRolloutSpec
from ..static_decode import StaticDecoder, supports


class StepSource(Protocol):
    # batch slots the rows share (None: as many as the batch has rows, all admitted at once)
    slots: int | None

    def start(self, widest: int, length: int) -> None:
        """A new batch: groups of up to `widest` rows, sequences of up to `length` tokens."""

    def prefill(self, prompts: list[list[int]], slots: list[int], adapters: list) -> Tensor:
        """Rows with these token sequences take these batch positions; their last logits."""

    def step(self, tokens: Tensor) -> Tensor:
        """Append one token to each live row; the next logits ([live rows, vocab])."""

    def recompute(self, seqs: list[list[int]], room: int, adapters: list) -> Tensor:
        """The live rows' cache rebuilt from their whole sequences (under the adapter now
        loaded), each row still to make up to `room` tokens; their last logits."""

    def compact(self, keep: Tensor) -> None:
        """Keep only the rows at batch positions `keep` (ascending), moved to the front."""

    def retire(self, positions: list[int]) -> None:
        """Rows at these positions have finished but keep their slots."""


def shared_prompts(prompts: list[list[int]], pad_id: int, device: torch.device):
    """The n samples of a group share their prompt: each distinct prompt once, left padded
    ([U, P] ids and mask), and each row's prompt index ([R]: prefix sharing)."""
    distinct: dict[tuple[int, ...], int] = {}
    owner = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
    ids, attn = left_pad([list(p) for p in distinct], pad_id, device)
    return ids, attn, torch.tensor(owner, device=device)


def _positions(attn: Tensor) -> Tensor:
    return (attn.cumsum(-1) - 1).clamp(min=0)


def _one_adapter(adapters: list) -> None:
    if any(a is not None for a in adapters):
        raise ValueError("this step source serves one adapter: rows must name none")


class CachedForward:
    """The PEFT model's forward with its dynamic cache: every row of the batch is admitted
    in one prefill (of its distinct prompts, fanned out to the rows), then decodes on."""

    slots = None

    def __init__(self, model: nn.Module, pad_id: int, device: torch.device):
        self.model, self.pad_id, self.device = model, pad_id, device
        self.past = None
        self.attn: Tensor | None = None  # [rows, tokens so far]
        self.pos: Tensor | None = None  # [rows, 1]: each row's last position

    def start(self, widest: int, length: int) -> None:
        self.past = self.attn = self.pos = None

    def _forward(self, ids: Tensor, attn: Tensor, pos: Tensor) -> Tensor:
        out = self.model(
            input_ids=ids,
            attention_mask=attn,
            position_ids=pos,
            past_key_values=self.past,
            use_cache=True,
            logits_to_keep=1,
        )
        self.past = out.past_key_values
        return out.logits[:, -1, :]

    def prefill(self, prompts: list[list[int]], slots: list[int], adapters: list) -> Tensor:
        _one_adapter(adapters)
        if self.past is not None or slots != list(range(len(prompts))):
            raise RuntimeError("the PEFT forward admits every row of a batch at once")
        ids, attn, own = shared_prompts(prompts, self.pad_id, self.device)
        pos = _positions(attn)
        logits = self._forward(ids, attn, pos)
        self.past.reorder_cache(own)  # the U distinct prompts' cache fanned out to R rows
        self.attn, self.pos = attn[own], pos[own][:, -1:]
        return logits[own]

    def step(self, tokens: Tensor) -> Tensor:
        ones = torch.ones((tokens.shape[0], 1), dtype=self.attn.dtype, device=self.device)
        self.attn, self.pos = torch.cat([self.attn, ones], 1), self.pos + 1
        return self._forward(tokens.unsqueeze(1), self.attn, self.pos)

    def recompute(self, seqs: list[list[int]], room: int, adapters: list) -> Tensor:
        _one_adapter(adapters)
        ids, attn = left_pad(seqs, self.pad_id, self.device)
        pos = _positions(attn)
        self.past = None
        logits = self._forward(ids, attn, pos)
        self.attn, self.pos = attn, pos[:, -1:]
        return logits

    def compact(self, keep: Tensor) -> None:
        self.past.reorder_cache(keep)
        self.attn, self.pos = self.attn[keep], self.pos[keep]

    def retire(self, positions: list[int]) -> None:
        pass  # finished rows decode on (their tokens unused) until a compaction drops them


class StaticSource:
    """The static decoder (static_decode.py): rows take slots of its fixed batch, finished
    rows' slots take new groups while the others decode on (continuous batching)."""

    def __init__(self, decoder: StaticDecoder, pad_id: int, device: torch.device):
        self.decoder, self.pad_id, self.device = decoder, pad_id, device
        self.slots = decoder.max_batch

    def start(self, widest: int, length: int) -> None:
        if widest > self.slots:  # it could never take its slots
            raise ValueError(
                f"torch backend: a group of {widest} samples exceeds rollout.max_batch_size "
                f"({self.slots}); raise it or use rollout.decode: dynamic"
            )
        self.decoder.reset()
        self.decoder.reserve(length)

    def prefill(self, prompts: list[list[int]], slots: list[int], adapters: list) -> Tensor:
        _one_adapter(adapters)
        ids, attn, own = shared_prompts(prompts, self.pad_id, self.device)
        return self.decoder.prefill(ids, attn, fan=own, slots=slots)

    def step(self, tokens: Tensor) -> Tensor:
        return self.decoder.step(tokens)

    def recompute(self, seqs: list[list[int]], room: int, adapters: list) -> Tensor:
        _one_adapter(adapters)
        # rows admitted at different times have made different counts of tokens: padded to
        # the longest, each still needs its own budget
        self.decoder.reset()
        self.decoder.reserve(max(map(len, seqs)) + room)
        return self.decoder.prefill(*left_pad(seqs, self.pad_id, self.device))

    def compact(self, keep: Tensor) -> None:
        self.decoder.compact(keep)

    def retire(self, positions: list[int]) -> None:
        # finished rows that keep their slots stop walking the cache
        self.decoder.retire([p for p in positions if p not in self.decoder.retired])


def static_decoder(
    model: nn.Module, rollout: TorchRolloutSpec, device: torch.device
) -> StaticDecoder | None:
    """The static decoder rollout.decode asks for (auto: on a GPU, for a model it supports),
    or None for the PEFT forward. StaticDecoder says why if it cannot take the model."""
    if rollout.decode == "dynamic":
        return None
    if rollout.decode == "auto" and (device.type != "cuda" or supports(model) is not None):
        return None
    # a CPU run keeps the eager step (no C++ toolchain is assumed)
    compile = "inductor" if rollout.compile and device.type == "cuda" else None
    return StaticDecoder(model, rollout.max_batch_size, compile=compile)
