"""The trainer's forward to the hidden states that predict each response token, for one
batch under one adapter or for several batches, each under its own adapter, in one pass.

Each item is one batch's rows under one adapter (`Rows`). With one adapter (`together`
false) the model computes as PEFT has it set (that adapter active, or all off where the
item's adapter is None); with several, every LoRA linear computes each item's adapter on
its own block of rows and columns (adapters/rows_lora.py). Either way an item's hidden
states are the ones its batch gives alone: padding to another item's width adds columns no
valid position attends to.

The G samples of a group share their prompt, so an item whose prompts repeat (`share`)
sends each distinct prompt through the model once and its samples' responses continue from
that prompt's KV cache (the gradient of every sample flows back into it). With 6-token
prompts and 16-token answers that is a quarter of the training FLOPs; with long prompts,
most of them. Items that share go through that forward together, the others through the
plain forward together.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..adapters.padding import left_pad
from ..adapters.rows_lora import RowBlock, row_blocks
from .batch import TrainBatch


@dataclass
class Rows:
    """One batch in a forward: its adapter (PEFT's name; None: the base model), whether
    its prompts go through once, and its LoRA dropout's generator (row blocks only)."""

    name: str | None
    batch: TrainBatch  # on the model's device
    share: bool
    gen: torch.Generator | None = None


def response_hidden(
    model, pad_id: int, items: list[Rows], together: bool, uniform: bool = False
) -> list[Tensor]:
    """Each item's final hidden states `[B, T, H]` at the positions that predict its
    response tokens. `model`: the PEFT model; `together`: row blocks (several adapters),
    else the one item under the adapter PEFT has active; `uniform`: every item that may
    share its prompts takes the sharing forward, repeats or not (sharded ranks must all run
    the same forwards)."""
    plain, shared = [], []
    for k, it in enumerate(items):
        if it.share:  # read from the batch only then: on a GPU each row's read syncs
            keys: dict[tuple[int, ...], int] = {}
            ids, lens = it.batch.input_ids.tolist(), it.batch.prompt_len.tolist()
            owner = [
                keys.setdefault(tuple(row[:n]), len(keys)) for row, n in zip(ids, lens, strict=True)
            ]
            if uniform or len(keys) < len(it.batch):
                shared.append((k, it, list(keys), owner))
                continue
        plain.append((k, it))
    body = model.get_base_model().model  # LoRA layers are injected in place
    off = not together and items[0].name is None
    out: list[Tensor] = [None] * len(items)  # type: ignore[list-item]
    with model.disable_adapter() if off else contextlib.nullcontext():
        if plain:
            hidden = _plain(body, pad_id, [it for _, it in plain], together)
            for (k, _), h in zip(plain, hidden, strict=True):
                out[k] = h
        if shared:
            hidden = _shared(body, pad_id, [x[1:] for x in shared], together)
            for (k, *_), h in zip(shared, hidden, strict=True):
                out[k] = h
    return out


def _blocks(blocks: list[RowBlock], together: bool):
    return row_blocks(blocks) if together else contextlib.nullcontext()


def _plain(body, pad_id: int, items: list[Rows], together: bool) -> list[Tensor]:
    width = max(it.batch.input_ids.shape[1] for it in items)
    ids, attn, blocks = [], [], []
    for it in items:
        n, w = it.batch.input_ids.shape
        ids.append(F.pad(it.batch.input_ids, (0, width - w), value=pad_id))
        attn.append(F.pad(it.batch.attention_mask, (0, width - w)))
        blocks.append(RowBlock(it.name, n, 0, w, it.gen))
    with _blocks(blocks, together):
        # use_cache=False: no KV cache to build in training; with one, each layer's cache
        # slot was a guard that made train.compile recompile per layer
        hidden = body(
            input_ids=ids[0] if len(ids) == 1 else torch.cat(ids),
            attention_mask=attn[0] if len(attn) == 1 else torch.cat(attn),
            use_cache=False,
        ).last_hidden_state  # [ΣB, L, H]
    out, row = [], 0
    for it in items:
        n, w = it.batch.input_ids.shape
        h = hidden[row : row + n, :w]
        out.append(h.gather(1, it.batch.resp_pos.unsqueeze(-1).expand(-1, -1, h.shape[-1])))
        row += n
    return out


def _shared(body, pad_id: int, items, together: bool) -> list[Tensor]:
    """Items (rows, distinct prompts, each sample's prompt index): every item's distinct
    prompts once (a prompt of two adapters is two rows), left-padded to the widest (every
    prompt ends at the last column), each adapter on its own columns; then every response
    over the prompts' cache, reordered to the samples."""
    device = items[0][0].batch.input_ids.device
    p_ids, p_mask = left_pad([q for _, keys, _ in items for q in keys], pad_id, device)
    width = p_ids.shape[1]
    owner, blocks, u0 = [], [], 0
    for it, keys, own in items:
        owner += [u0 + o for o in own]
        c0 = width - max(len(q) for q in keys)
        blocks.append(RowBlock(it.name, len(keys), c0, width, it.gen))
        u0 += len(keys)
    own_t = torch.tensor(owner, device=device)
    with _blocks(blocks, together):
        out = body(
            input_ids=p_ids,
            attention_mask=p_mask,
            position_ids=(p_mask.cumsum(-1) - 1).clamp(min=0),
            use_cache=True,
        )
    first = out.last_hidden_state[own_t, -1]  # [ΣB, H]: predicts response token 0
    lengths = [it.batch.resp_tokens.shape[1] for it, _, _ in items]
    t_max = max(lengths)
    rest = None
    if t_max > 1:
        cache = out.past_key_values
        cache.reorder_cache(own_t)  # [ΣU, …] → [ΣB, …], differentiable (index_select)
        resp_in, resp_mask, blocks = [], [], []
        for (it, _, _), t in zip(items, lengths, strict=True):
            mb = it.batch  # token j predicts token j + 1
            resp_in.append(F.pad(mb.resp_tokens[:, : t - 1], (0, t_max - t), value=pad_id))
            resp_mask.append(F.pad(mb.resp_attn[:, : t - 1], (0, t_max - t)))
            blocks.append(RowBlock(it.name, len(mb), 0, t - 1, it.gen))  # t == 1: no LoRA
        resp_mask = torch.cat(resp_mask).to(p_mask.dtype)
        positions = p_mask.sum(-1)[own_t].unsqueeze(1) + torch.arange(t_max - 1, device=device)
        with _blocks(blocks, together):
            rest = body(
                input_ids=torch.cat(resp_in),
                attention_mask=torch.cat([p_mask[own_t], resp_mask], dim=1),
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            ).last_hidden_state  # [ΣB, T_max − 1, H]
    hidden, row = [], 0
    for (it, _, _), t in zip(items, lengths, strict=True):
        n = len(it.batch)
        h = first[row : row + n].unsqueeze(1)
        if t > 1:
            h = torch.cat([h, rest[row : row + n, : t - 1]], dim=1)
        hidden.append(h)
        row += n
    return hidden
