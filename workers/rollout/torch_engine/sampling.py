"""Sampling a decode step's tokens: pure functions of the logits and the noise."""

from __future__ import annotations

import torch


def draw(logits: torch.Tensor, temperature: float, u=None, index=None):
    """Tokens and their logprobs at temperature T from [rows, vocab] logits: greedy
    without `u`, else argmax(logits/T + Gumbel noise), the noise made from uniform draws
    `u` (row r takes u[index[r]]): a draw from the softmax at temperature T. The logprobs
    are those of the untruncated softmax at T whichever way the token was chosen. A pure
    function, compiled with rollout.compile."""
    x = logits.float() / temperature
    if u is None:
        tokens = x.argmax(dim=-1)
    else:
        u = u.index_select(0, index).clamp(1e-20, 1.0 - 1e-7)
        gumbel = -torch.log(-torch.log(u))
        tokens = (x + gumbel).argmax(dim=-1)
    logprobs = x.gather(1, tokens.unsqueeze(1)).squeeze(1) - torch.logsumexp(x, dim=-1)
    return tokens, logprobs
