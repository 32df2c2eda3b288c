"""Prompts left-padded into one batch: what the trainer's forward over shared prompts
(policy/forward.py) and the torch engine's prefill (rollout/torch_engine/sources.py) both
feed the model, each prompt ending at the last column so its samples continue its KV cache."""

from __future__ import annotations

import torch
from torch import Tensor


def left_pad(seqs: list[list[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Token sequences as [N, longest] ids padded on the left, and their mask (every
    sequence ends at the last column: prompts whose KV cache their samples continue)."""
    width = max(len(p) for p in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for u, p in enumerate(seqs):
        ids[u, width - len(p) :] = torch.tensor(p)
        attn[u, width - len(p) :] = 1
    return ids.to(device), attn.to(device)
