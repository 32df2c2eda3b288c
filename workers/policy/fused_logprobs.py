"""Logprob and entropy of chosen tokens through a frozen LM head, fused for the GPU.

`chunked_token_logprobs` recomputes each chunk under autograd (checkpoint), so backward runs
the head matmul twice more and materialises the gather's dense gradient and the softmax's
saved output. Here backward is written out: per chunk, recompute the logits once and use
d log p_t / d logits = (onehot_t − softmax) / T, so a chunk costs one matmul in forward and
two in backward, and only one chunk's fp32 logits live at a time. The head matmul takes
bf16 operands and accumulates and returns fp32 (`out_dtype`), so no bf16 rounding reaches the
softmax (a logit of 20 rounded to bf16 is off by up to 0.06).

Entropy is returned without gradient, as in `chunked_token_logprobs`: it is only logged.

When the logprobs will be differentiated (grad enabled and `hidden` requiring it), the
gradient is computed in the forward instead: d lp_t / d hidden = (onehot_t − p)·W / T, and
the upstream gradient g is one scalar a row, so the forward keeps D = (onehot − p)·W
([N, H], fp32; the [c, V] factor cast to the head's dtype as the backward's was) and the
backward is D · g / T, no matmul. A chunk then costs two matmuls in all instead of three
(the backward's recompute of the logits is gone), 1/3 of the head's matmul work.

With `compiled` (train.compile on a GPU) each chunk's work after the matmul is one pure
function, compiled: eager, forward and backward each made about nine passes over the
chunk's [c, V] float32 logits (divide, logsumexp, softmax, products, sums; then subtract,
exp, scale, scatter, cast), 70 ms of a 229 ms compiled train step at 16×1024 tokens on an
H200. Fused, each reads the logits about twice.
"""

from __future__ import annotations

import torch

from .logprobs import chunked_token_logprobs


def _logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """fp32 logits `[n, V]` (before the temperature) of bf16/fp32 `hidden [n, H]` against
    `weight [V, H]`."""
    if hidden.is_cuda and weight.dtype in (torch.bfloat16, torch.float16):
        return torch.mm(hidden.to(weight.dtype), weight.t(), out_dtype=torch.float32)
    logits = hidden.to(weight.dtype) @ weight.t()
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def _stats_in_place(logits, targets, temperature: float):
    """(log Z, logprob of the targets, entropy) of a chunk's raw logits; may overwrite them."""
    if temperature != 1.0:
        logits.div_(temperature)
    z = torch.logsumexp(logits, dim=-1)  # [c]
    lp = logits.gather(1, targets[:, None])[:, 0] - z
    # H = log Z − E[logit]
    return z, lp, z - (torch.softmax(logits, dim=-1) * logits).sum(-1)


def _stats_dlogits_in_place(logits, targets, temperature: float, dtype):
    """_stats_in_place and (onehot − p) in `dtype`, built in place over the logits."""
    z, lp, ent = _stats_in_place(logits, targets, temperature)  # logits now divided by T
    d = logits.sub_(z[:, None]).exp_().neg_()
    d = d.scatter_add_(1, targets[:, None], torch.ones_like(d[:, :1])).to(dtype)
    return z, lp, ent, d


def _grad_in_place(logits, lse, targets, g, temperature: float, dtype):
    """dL/d(raw logits) = g · (onehot − p) / T, built in place over the logits buffer."""
    if temperature != 1.0:
        logits.div_(temperature)
    g = g[:, None] / temperature
    grad = logits.sub_(lse[:, None]).exp_().mul_(-g)
    return grad.scatter_add_(1, targets[:, None], g).to(dtype)


def _stats(logits, targets, temperature: float):
    """_stats_in_place as a pure function (what torch.compile fuses)."""
    x = logits / temperature
    z = torch.logsumexp(x, dim=-1)
    lp = x.gather(1, targets[:, None])[:, 0] - z
    return z, lp, z - (torch.exp(x - z[:, None]) * x).sum(-1)


def _stats_dlogits(logits, targets, temperature: float, dtype):
    """_stats_dlogits_in_place as a pure function."""
    x = logits / temperature
    z = torch.logsumexp(x, dim=-1)
    lp = x.gather(1, targets[:, None])[:, 0] - z
    p = torch.exp(x - z[:, None])
    vocab = torch.arange(logits.shape[1], device=logits.device)
    onehot = (vocab[None, :] == targets[:, None]).to(p.dtype)
    return z, lp, z - (p * x).sum(-1), (onehot - p).to(dtype)


def _grad(logits, lse, targets, g, temperature: float, dtype):
    """_grad_in_place as a pure function: the one-hot is a compare, not a scatter."""
    p = torch.exp(logits / temperature - lse[:, None])
    vocab = torch.arange(logits.shape[1], device=logits.device)
    onehot = (vocab[None, :] == targets[:, None]).to(p.dtype)
    return ((onehot - p) * (g[:, None] / temperature)).to(dtype)


_COMPILED: dict[str, object] = {}


def _chunk_fns(mode: str):
    """The per-chunk (stats, grad, stats with onehot − p) functions: "in_place" (eager, no
    extra [c, V] float32 buffer), "pure" (the same maths as pure functions) or "compiled"
    (those, torch.compile'd)."""
    if mode == "in_place":
        return _stats_in_place, _grad_in_place, _stats_dlogits_in_place
    if mode == "pure":
        return _stats, _grad, _stats_dlogits
    if mode != "compiled":
        raise ValueError(f"mode must be in_place, pure or compiled, not {mode!r}")
    if not _COMPILED:
        _COMPILED["stats"] = torch.compile(_stats)
        _COMPILED["grad"] = torch.compile(_grad)
        _COMPILED["stats_dlogits"] = torch.compile(_stats_dlogits)
    return _COMPILED["stats"], _COMPILED["grad"], _COMPILED["stats_dlogits"]


def _mm_f32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a·b accumulated and returned in float32 (bf16 operands on CUDA)."""
    if a.is_cuda and a.dtype in (torch.bfloat16, torch.float16):
        return torch.mm(a, b, out_dtype=torch.float32)
    return (a @ b).to(torch.promote_types(a.dtype, torch.float32))


class _FusedTokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, targets, weight, temperature, chunk_size, mode, grad_in_forward):
        n = hidden.shape[0]
        out_dtype = torch.promote_types(hidden.dtype, torch.float32)
        lp = torch.empty(n, dtype=out_dtype, device=hidden.device)
        ent = torch.empty(n, dtype=out_dtype, device=hidden.device)
        lse = torch.empty(n, dtype=out_dtype, device=hidden.device)
        stats, _, stats_d = _chunk_fns(mode)
        # with grad_in_forward: (onehot − p)·W of every row, the gradient up to g / T
        dh = None
        if grad_in_forward:
            dh = torch.empty(hidden.shape, dtype=out_dtype, device=hidden.device)
        for s in range(0, n, chunk_size):
            logits = _logits(hidden[s : s + chunk_size], weight)  # [c, V]
            rows = slice(s, s + chunk_size)
            if dh is None:
                lse[rows], lp[rows], ent[rows] = stats(logits, targets[rows], temperature)
                continue
            lse[rows], lp[rows], ent[rows], d = stats_d(
                logits, targets[rows], temperature, weight.dtype
            )
            del logits
            dh[rows] = _mm_f32(d, weight)
        if dh is not None:
            ctx.save_for_backward(dh)
        else:
            ctx.save_for_backward(hidden, targets, weight, lse)
        ctx.temperature, ctx.chunk_size, ctx.mode = temperature, chunk_size, mode
        ctx.grad_in_forward, ctx.hidden_dtype = grad_in_forward, hidden.dtype
        ctx.mark_non_differentiable(ent)
        return lp, ent

    @staticmethod
    def backward(ctx, grad_lp, _grad_ent):
        t, c = ctx.temperature, ctx.chunk_size
        if ctx.grad_in_forward:
            (dh,) = ctx.saved_tensors
            grad_h = (dh * (grad_lp.to(dh.dtype) / t)[:, None]).to(ctx.hidden_dtype)
            return grad_h, None, None, None, None, None, None
        hidden, targets, weight, lse = ctx.saved_tensors
        _, grad_fn, _ = _chunk_fns(ctx.mode)
        grad_h = torch.empty_like(hidden)
        for s in range(0, hidden.shape[0], c):
            rows = slice(s, s + c)
            logits = _logits(hidden[rows], weight)  # [c, V] fp32
            grad = grad_fn(logits, lse[rows], targets[rows], grad_lp[rows], t, weight.dtype)
            grad_h[rows] = (grad @ weight).to(hidden.dtype)
        return grad_h, None, None, None, None, None, None


def fused_token_logprobs(
    hidden: torch.Tensor,  # [N, H] final hidden states at positions predicting `targets`
    targets: torch.Tensor,  # [N] token ids
    lm_head_weight: torch.Tensor,  # [V, H], frozen
    temperature: float = 1.0,
    chunk_size: int = 1024,
    mode: str = "in_place",
    grad_in_forward: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprob [N], entropy [N]) of `targets` under softmax(logits / temperature), the same
    function as `chunked_token_logprobs`, with a hand-written chunked backward (`mode`: see
    _chunk_fns). `grad_in_forward` (default: whenever the result will be differentiated)
    computes the gradient's [N, H] factor in the forward (see the module docstring); False
    recomputes each chunk's logits in the backward instead."""
    if lm_head_weight.requires_grad:
        raise ValueError("fused_token_logprobs needs a frozen LM head (no weight gradient)")
    if hidden.shape[0] == 0:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty
    if grad_in_forward is None:
        grad_in_forward = torch.is_grad_enabled() and hidden.requires_grad
    return _FusedTokenLogprobs.apply(
        hidden, targets, lm_head_weight, temperature, chunk_size, mode, grad_in_forward
    )


def token_logprobs(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    lm_head_weight: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    compiled: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The policy's choice: the fused path on a GPU with a frozen head (its chunk maths
    compiled with train.compile), else the reference."""
    if hidden.is_cuda and not lm_head_weight.requires_grad:
        mode = "compiled" if compiled else "in_place"
        return fused_token_logprobs(hidden, targets, lm_head_weight, temperature, chunk_size, mode)
    return chunked_token_logprobs(hidden, targets, lm_head_weight, temperature, chunk_size)
