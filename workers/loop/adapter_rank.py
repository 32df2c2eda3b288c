"""The LoRA update's effective rank, from the adapter's own singular values.

Each adapted linear adds ΔW = s·B·A (B: [out, r], A: [r, in]). Its effective rank is
exp(H(p)), H the entropy of p_i = σ_i / Σσ over ΔW's singular values (Roy & Vetterli, 2007):
r when the update spreads evenly over its r directions, 1 when one direction carries it all.
The scale s changes no p_i, so it is left out. The singular values of B·A are those of the
r×r product R_B·R_Aᵀ, with B = Q_B·R_B and Aᵀ = Q_A·R_A (QR): O((in + out)·r²) a module,
a few tokens' worth of a forward pass, never the out×in matrix.

`lora/effective_rank` (workers/names.py: HealthMetric) is the mean over the adapter's
modules; a rank that collapses while the adapter trains is the alarm lora_rank_collapse
(workers/alarms.py)."""

from __future__ import annotations

import math

import torch

from ..names import HealthMetric

METRIC: HealthMetric = "lora/effective_rank"
# singular values below this share of the largest are numerical noise, not directions
_RELATIVE_FLOOR = 1e-6


def effective_rank(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """exp(entropy) of the normalized singular values of B·A; None when the update is zero
    (B starts at zero: before the first step there is no direction at all)."""
    a32, b32 = a.detach().to(torch.float32), b.detach().to(torch.float32)  # [r, in], [out, r]
    r_b = torch.linalg.qr(b32, mode="r").R  # [r, r]
    r_a = torch.linalg.qr(a32.T, mode="r").R  # [r, r]
    sigma = torch.linalg.svdvals(r_b @ r_a.T)  # [r]
    top = float(sigma.max()) if sigma.numel() else 0.0
    if not math.isfinite(top) or top <= 0.0:
        return None
    sigma = sigma[sigma > top * _RELATIVE_FLOOR]
    p = sigma / sigma.sum()
    return float(torch.exp(-(p * torch.log(p)).sum()))


def adapter_effective_rank(tensors: dict[str, torch.Tensor]) -> dict[str, float]:
    """{METRIC: mean effective rank over the modules} of a PEFT adapter's tensors (keys
    `….lora_A.weight` / `….lora_B.weight`, as the trainer publishes them); {} when no module
    has moved yet."""
    ranks = []
    for key, a in tensors.items():
        if ".lora_A." not in key:
            continue
        b = tensors.get(key.replace(".lora_A.", ".lora_B."))
        if b is None or a.dim() != 2 or b.dim() != 2:
            continue
        rank = effective_rank(a, b)
        if rank is not None:
            ranks.append(rank)
    return {METRIC: sum(ranks) / len(ranks)} if ranks else {}
