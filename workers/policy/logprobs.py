"""Logprobs and entropy of chosen tokens without materialising full-vocabulary logits for
the whole batch: rows are pushed through the LM head in chunks, and with grad each chunk is
recomputed in backward (activation checkpointing), so only one chunk's fp32 logits live at
a time. With a 150k vocabulary this is what lets large batches fit."""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint


def _chunk(
    hidden: torch.Tensor,  # [n, H]
    targets: torch.Tensor,  # [n]
    weight: torch.Tensor,  # [V, H]
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    # Under bf16 autocast the hidden states come out bf16 while the head weight is fp32.
    logits = hidden.to(weight.dtype) @ weight.t()  # [n, V]
    # At least fp32 for the softmax (bf16 under autocast would lose the tail); fp64 stays.
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    lse = torch.logsumexp(logits, dim=-1)  # [n]
    lp = logits.gather(1, targets.unsqueeze(1)).squeeze(1) - lse  # [n]
    probs = torch.softmax(logits, dim=-1)
    entropy = lse - (probs * logits).sum(dim=-1)  # H = log Z − E[logit]
    return lp, entropy


def chunked_token_logprobs(
    hidden: torch.Tensor,  # [N, H] final hidden states at positions predicting `targets`
    targets: torch.Tensor,  # [N] token ids
    lm_head_weight: torch.Tensor,  # [V, H]
    temperature: float = 1.0,
    chunk_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (logprob [N], entropy [N]) of `targets` under softmax(logits / temperature).
    Entropy carries no gradient through the checkpoint's second output in practice; callers
    only log it."""
    lps, ents = [], []
    grad = torch.is_grad_enabled() and (hidden.requires_grad or lm_head_weight.requires_grad)
    for start in range(0, hidden.shape[0], chunk_size):
        h, t = hidden[start : start + chunk_size], targets[start : start + chunk_size]
        if grad:
            lp, ent = checkpoint(_chunk, h, t, lm_head_weight, temperature, use_reentrant=False)
        else:
            lp, ent = _chunk(h, t, lm_head_weight, temperature)
        lps.append(lp)
        ents.append(ent.detach())
    if not lps:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty
    return torch.cat(lps), torch.cat(ents)
