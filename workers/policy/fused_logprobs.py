"""Logprob and entropy of chosen tokens through a frozen LM head, fused for the GPU.

`chunked_token_logprobs` recomputes each chunk under autograd (checkpoint), so backward runs
the head matmul twice more and materialises the gather's dense gradient and the softmax's
saved output. Here backward is written out: per chunk, recompute the logits once and use
d log p_t / d logits = (onehot_t − softmax) / T, so a chunk costs one matmul in forward and
two in backward, and only one chunk's fp32 logits live at a time. The head matmul takes
bf16 operands and accumulates and returns fp32 (`out_dtype`), so no bf16 rounding reaches the
softmax (a logit of 20 rounded to bf16 is off by up to 0.06).

Entropy is returned without gradient, as in `chunked_token_logprobs`: it is only logged.
"""

from __future__ import annotations

import torch

from .logprobs import chunked_token_logprobs


def _logits(hidden: torch.Tensor, weight: torch.Tensor, temperature: float) -> torch.Tensor:
    """fp32 logits `[n, V]` of bf16/fp32 `hidden [n, H]` against `weight [V, H]`."""
    if hidden.is_cuda and weight.dtype in (torch.bfloat16, torch.float16):
        logits = torch.mm(hidden.to(weight.dtype), weight.t(), out_dtype=torch.float32)
    else:
        logits = hidden.to(weight.dtype) @ weight.t()
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return logits / temperature if temperature != 1.0 else logits


class _FusedTokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, targets, weight, temperature, chunk_size):
        n = hidden.shape[0]
        out_dtype = torch.promote_types(hidden.dtype, torch.float32)
        lp = torch.empty(n, dtype=out_dtype, device=hidden.device)
        ent = torch.empty(n, dtype=out_dtype, device=hidden.device)
        lse = torch.empty(n, dtype=out_dtype, device=hidden.device)
        for s in range(0, n, chunk_size):
            logits = _logits(hidden[s : s + chunk_size], weight, temperature)  # [c, V]
            z = torch.logsumexp(logits, dim=-1)  # [c]
            lse[s : s + chunk_size] = z
            lp[s : s + chunk_size] = logits.gather(1, targets[s : s + chunk_size, None])[:, 0] - z
            # H = log Z − E[logit], with the softmax computed in place over the chunk's logits
            mean_logit = (torch.softmax(logits, dim=-1) * logits).sum(-1)
            ent[s : s + chunk_size] = z - mean_logit
        ctx.save_for_backward(hidden, targets, weight, lse)
        ctx.temperature, ctx.chunk_size = temperature, chunk_size
        ctx.mark_non_differentiable(ent)
        return lp, ent

    @staticmethod
    def backward(ctx, grad_lp, _grad_ent):
        hidden, targets, weight, lse = ctx.saved_tensors
        t, c = ctx.temperature, ctx.chunk_size
        grad_h = torch.empty_like(hidden)
        for s in range(0, hidden.shape[0], c):
            logits = _logits(hidden[s : s + c], weight, t)  # [c, V] fp32
            # dL/dlogits = g · (onehot − p) / T, built in place over the logits buffer
            g = grad_lp[s : s + c, None]
            grad = logits.sub_(lse[s : s + c, None]).exp_().mul_(-g / t)
            grad.scatter_add_(1, targets[s : s + c, None], g / t)
            grad_h[s : s + c] = (grad.to(weight.dtype) @ weight).to(hidden.dtype)
        return grad_h, None, None, None, None


def fused_token_logprobs(
    hidden: torch.Tensor,  # [N, H] final hidden states at positions predicting `targets`
    targets: torch.Tensor,  # [N] token ids
    lm_head_weight: torch.Tensor,  # [V, H], frozen
    temperature: float = 1.0,
    chunk_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprob [N], entropy [N]) of `targets` under softmax(logits / temperature), the same
    function as `chunked_token_logprobs`, with a hand-written chunked backward."""
    if lm_head_weight.requires_grad:
        raise ValueError("fused_token_logprobs needs a frozen LM head (no weight gradient)")
    if hidden.shape[0] == 0:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty
    return _FusedTokenLogprobs.apply(hidden, targets, lm_head_weight, temperature, chunk_size)


def token_logprobs(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    lm_head_weight: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The policy's choice: the fused path on a GPU with a frozen head, else the reference."""
    if hidden.is_cuda and not lm_head_weight.requires_grad:
        return fused_token_logprobs(hidden, targets, lm_head_weight, temperature, chunk_size)
    return chunked_token_logprobs(hidden, targets, lm_head_weight, temperature, chunk_size)
