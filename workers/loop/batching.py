"""From scored groups to training samples: advantages, dynamic sampling."""

from __future__ import annotations

import torch

from ..grpo import ADVANTAGES, dynamic_sampling_mask
from ..policy import TrainSample
from ..spec import AlgorithmSpec
from .types import ScoredGroup


def groups_to_samples(
    groups: list[ScoredGroup], algo: AlgorithmSpec
) -> tuple[list[TrainSample], list[list[float]], dict[str, float]]:
    """Returns the samples to train on, the advantages of every group (for the sample
    inspector) and metrics."""
    if not groups:
        return [], [], {}
    rewards = torch.tensor([g.rewards for g in groups], dtype=torch.float64)  # [N, G]
    adv, metrics = ADVANTAGES.get(algo.advantage)(rewards, eps=algo.advantage_eps)
    keep = torch.ones(len(groups), dtype=torch.bool)
    if algo.dynamic_sampling:
        keep, ds = dynamic_sampling_mask(rewards)
        metrics.update(ds)
    samples = []
    for g, group in enumerate(groups):
        if not keep[g]:
            continue
        for s, sample in enumerate(group.result.samples):
            samples.append(
                TrainSample(
                    group.result.prompt_ids,
                    sample.token_ids,
                    sample.logprobs,
                    sample.versions,
                    float(adv[g, s]),
                    sample.loss_mask,
                )
            )
    return samples, adv.tolist(), metrics
