"""token_mult_prob_error for stale tokens: a trainer forward under the adapter version that
generated them.

The metric compares the engine's logprob of a token with the trainer's under the *same*
adapter version. The training forward runs the current version, so it covers only tokens
of that version; in an async run (max_staleness ≥ 1) nearly every token is older. Each
adapter therefore keeps a copy of each version it published still within the staleness
bound (`AdapterHistory`; LoRA tensors: about a megabyte for the 25M bench model) and, every
step, the policy runs a no-grad forward of up to `train.mult_prob_error_samples` stale
samples with their version's adapter swapped in, then swaps the current one back bit for
bit (`LoraPolicy.stale_sums`). Here: the history, the pick and the sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..grpo import gen_kl_error, token_mult_prob_error
from .batch import TrainBatch

METRICS = ("token_mult_prob_error", "gen_kl_error")


class AdapterHistory:
    """Copies of the adapters published lately, by version: the newest `keep` + 1 of them
    (the current one and those a group within the staleness bound can come from)."""

    def __init__(self, keep: int):
        self.keep = keep
        self._tensors: dict[int, dict[str, torch.Tensor]] = {}

    def record(self, version: int, tensors: dict[str, torch.Tensor]) -> None:
        self._tensors[version] = {k: v.detach().clone() for k, v in tensors.items()}
        for old in [v for v in self._tensors if v < version - self.keep]:
            del self._tensors[old]

    def get(self, version: int) -> dict[str, torch.Tensor] | None:
        return self._tensors.get(version)

    def __contains__(self, version: int) -> bool:
        return version in self._tensors

    def versions(self) -> list[int]:
        return sorted(self._tensors)


@dataclass
class TokenSums:
    """Metric sums over tokens (value × token count), so that groups of tokens combine."""

    sums: dict[str, float]
    tokens: float

    @staticmethod
    def empty() -> TokenSums:
        return TokenSums(dict.fromkeys(METRICS, 0.0), 0.0)

    def add(self, lp_roll: torch.Tensor, lp_trainer: torch.Tensor, mask: torch.Tensor) -> None:
        n = mask.sum().item()
        if n == 0:
            return
        self.sums["token_mult_prob_error"] += token_mult_prob_error(lp_roll, lp_trainer, mask) * n
        self.sums["gen_kl_error"] += gen_kl_error(lp_roll, lp_trainer, mask) * n
        self.tokens += n


def merge(metrics: dict[str, float], same_tokens: float, stale: TokenSums) -> dict[str, float]:
    """The step's metrics with the stale tokens' sums folded in: a token-weighted mean over
    the current version's tokens (from the training forward) and the stale ones."""
    if stale.tokens == 0:
        return metrics
    out = dict(metrics)
    for k in METRICS:
        n_same = same_tokens if k in metrics else 0.0
        out[k] = (metrics.get(k, 0.0) * n_same + stale.sums[k]) / (n_same + stale.tokens)
    return out


def _rows(batch: TrainBatch, index: torch.Tensor) -> TrainBatch:
    return TrainBatch(*(getattr(batch, f)[index] for f in batch.__dataclass_fields__))


@torch.no_grad()
def stale_pick(
    batch: TrainBatch, history: AdapterHistory, current: int, limit: int
) -> tuple[TrainBatch, list[int]] | None:
    """The samples of `batch` the check runs (at most `limit` with tokens of a version in
    `history` other than `current`, spread evenly over the batch) and those versions, in
    order; None when there is nothing to check."""
    known = torch.tensor([v for v in history.versions() if v != current], dtype=torch.long)
    stale = (batch.mask > 0) & torch.isin(batch.versions, known)  # [B, T]
    rows = stale.any(dim=1).nonzero().squeeze(1)
    if limit <= 0 or len(rows) == 0:
        return None
    if len(rows) > limit:
        rows = rows[torch.arange(limit) * len(rows) // limit]
    part = _rows(batch, rows)
    return part, part.versions[stale[rows]].unique().tolist()


def of_version(part: TrainBatch, version: int) -> TrainBatch:
    """The samples of `part` with tokens of `version`."""
    return _rows(part, (part.versions == version).any(dim=1).nonzero().squeeze(1))
