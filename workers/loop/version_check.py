"""token_mult_prob_error for stale tokens: a trainer forward under the adapter version that
generated them.

The metric compares the engine's logprob of a token with the trainer's under the *same*
adapter version. The training forward runs the current version, so it covers only tokens
of that version; in an async run (max_staleness ≥ 1) nearly every token is older. The
executor therefore keeps a copy of each published adapter still within the staleness bound
(LoRA tensors: about a megabyte for the 25M bench model) and, every step, runs a no-grad
forward of up to `train.mult_prob_error_samples` stale samples with their version's adapter
swapped in, then swaps the current one back bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..grpo import gen_kl_error, token_mult_prob_error
from ..policy import LoraPolicy
from ..policy.batch import TrainBatch

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


def stale_token_sums(
    policy: LoraPolicy, batch: TrainBatch, history: AdapterHistory, limit: int
) -> TokenSums:
    """Sums of the metrics over the tokens of `batch` whose version is not the policy's
    current one but is in `history`, each under a forward of its own version's adapter.
    At most `limit` samples go through that forward, spread evenly over the batch (groups
    are consecutive, so the pick covers them): the check then costs a fixed fraction of a
    forward, whatever the batch size."""
    out = TokenSums.empty()
    pick = stale_pick(batch, history, policy.adapter_version, limit)
    if pick is None:
        return out
    part, versions = pick
    # A sharded policy's ranks all hold the whole batch and pick the same rows; each takes
    # its share of them (`policy.parallel.part`) and runs as many forwards as the others (each one
    # gathers the sharded layers), then the sums are added up across the group. One
    # process: its share is everything and the reduction does nothing.
    share = policy.shares_prompts(part)  # one choice for every rank and micro-batch
    restore = policy.adapter_tensors()  # a CPU copy of the current adapter (collective)
    current_version = policy.adapter_version
    was_training = policy.model.training
    policy.model.eval()  # no dropout: the engine samples without it
    size = policy.spec.train.micro_batch_size
    try:
        for v in versions:
            policy.load_adapter_tensors(history.get(v), current_version)
            own = of_version(part, v)
            mine, n_micro = policy.parallel.part(own, size)
            for i in range(n_micro):
                mb = mine.slice(i * size, (i + 1) * size)
                counted = len(mb) > 0  # else a repeat, only to keep the forwards in step
                mb = (mb if counted else own.slice(0, size)).to(policy.device)
                lp, _ = policy.token_logprobs(mb, share)
                if counted:
                    out.add(mb.lp_roll, lp, mb.mask * (mb.versions == v).to(mb.mask.dtype))
    finally:
        policy.load_adapter_tensors(restore, current_version)
        policy.model.train(was_training)
    sums, tokens = policy.parallel.reduce_metrics(out.sums, dict.fromkeys(METRICS, out.tokens))
    return TokenSums(dict(sums), tokens[METRICS[0]])
