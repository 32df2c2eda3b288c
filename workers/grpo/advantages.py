"""Group advantages. Input rewards are `[N, G]`: N prompts × G samples of each prompt."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .registry import Registry

Metrics = dict[str, float]
AdvantageFn = Callable[..., tuple[torch.Tensor, Metrics]]
ADVANTAGES: Registry[AdvantageFn] = Registry("advantage")


@ADVANTAGES.register("grpo")
def grpo(rewards: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, Metrics]:
    """(r − mean) / (std + eps), std the *sample* std (Bessel-corrected, as torch.std, TRL
    and verl use)."""
    mean = rewards.mean(dim=1, keepdim=True)  # [N, 1]
    std = rewards.std(dim=1, keepdim=True)  # [N, 1]
    return (rewards - mean) / (std + eps), {"advantage/group_std": std.mean().item()}


@ADVANTAGES.register("dr_grpo")
def dr_grpo(rewards: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, Metrics]:
    """r − mean: dividing by the std up-weights groups that are nearly all right or all wrong
    (Dr.GRPO's difficulty bias), so leave it out."""
    del eps
    return rewards - rewards.mean(dim=1, keepdim=True), {}


@ADVANTAGES.register("rloo")
def rloo(rewards: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, Metrics]:
    """r_i − mean_{j≠i} r_j = G/(G−1) · (r_i − mean): a baseline that excludes the sample."""
    del eps
    g = rewards.shape[1]
    others = (rewards.sum(dim=1, keepdim=True) - rewards) / (g - 1)  # [N, G]
    return rewards - others, {}


def dynamic_sampling_mask(rewards: torch.Tensor) -> tuple[torch.Tensor, Metrics]:
    """Keep groups whose rewards differ: a group with equal rewards has zero advantage and
    only dilutes the batch. Returns a bool mask `[N]` and the fraction dropped."""
    keep = (rewards.max(dim=1).values - rewards.min(dim=1).values) > 0  # [N]
    dropped = (~keep).sum().item()
    return keep, {
        "dynamic_sampling/dropped_groups": float(dropped),
        "dynamic_sampling/dropped_frac": dropped / max(rewards.shape[0], 1),
    }
