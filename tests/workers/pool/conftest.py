"""Shared pieces of the pool tests: a run spec on the tiny model, and adapters made by the
trainer itself (a LoraPolicy whose lora_B is drawn from a seed), with the probe the version
handshake checks."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from workers.adapters.update import AdapterUpdate
from workers.loop.executor import LocalExecutor
from workers.policy import LoraPolicy, TrainSample, collate
from workers.rollout.base import GroupResult, SamplingParams
from workers.spec import LoraSpec, RunSpec, parse_spec

LORA = {
    "r": 8,
    "alpha": 16,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}
PROMPTS = ["12+34=", "7+8=", "40+41="]
GREEDY = SamplingParams(max_new_tokens=8, greedy=True)
SEEDED = SamplingParams(temperature=1.0, max_new_tokens=8)
LONG = SamplingParams(temperature=2.0, max_new_tokens=48)  # long enough for a pause to cut
RUN_LORA = LoraSpec(**LORA)


os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")


def pool_spec(tiny_dir: Path, backend: str, **extra: Any) -> RunSpec:
    return parse_spec(
        {
            "model": {"path": str(tiny_dir)},
            "lora": LORA,
            "rollout": {"backend": backend, "max_new_tokens": 8, **extra},
            "seed": 3,
        }
    )


class AdapterMaker:
    """Adapters of the trainer's own format, each a fixed function of a seed, and the
    trainer's logprobs of samples under any of them."""

    def __init__(self, tiny_dir: Path):
        self.policy = LoraPolicy(pool_spec(tiny_dir, "torch"), tiny_dir)
        self.tok = self.policy.tokenizer
        self.tensors: dict[int, dict[str, torch.Tensor]] = {}

    def ids(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

    def _set(self, seed: int, scale: float) -> None:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.policy.model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=gen) * scale)

    async def update(self, seed: int, version: int, scale: float = 1.0) -> AdapterUpdate:
        """The adapter of `seed` as the trainer publishes it, labelled `version`."""
        self._set(seed, scale)
        self.policy.adapter.version = version
        update = await LocalExecutor(self.policy).adapter_update()
        self.tensors[seed] = {k: v.clone() for k, v in update.tensors.items()}
        return update

    @staticmethod
    def relabel(update: AdapterUpdate, version: int) -> AdapterUpdate:
        return dataclasses.replace(update, version=version)

    @torch.no_grad()
    def logprobs(self, seed: int, results: list[GroupResult], temperature: float):
        """The trainer's logprobs of every sample of `results` (with tokens) under adapter
        `seed`."""
        self.policy.load_adapter_tensors(self.tensors[seed], self.policy.adapter.version)
        samples = [
            TrainSample(r.prompt_ids, s.token_ids, s.logprobs, s.versions, 0.0)
            for r in results
            for s in r.samples
            if s.token_ids
        ]
        batch = collate(samples, self.tok.pad_token_id)
        rollout = self.policy.spec.rollout.model_copy(update={"temperature": temperature})
        spec = self.policy.spec.model_copy(update={"rollout": rollout})
        self.policy.model.eval()
        lp, _ = self.policy.token_logprobs(batch, spec=spec)
        return [lp[i, : len(s.response_ids)].tolist() for i, s in enumerate(samples)]


@pytest.fixture(scope="session")
def maker(tiny_dir: Path) -> AdapterMaker:
    return AdapterMaker(tiny_dir)


def mean_exp_diff(engine: list[list[float]], trainer: list[list[float]]) -> float:
    """token_mult_prob_error: mean exp|lp_engine − lp_trainer| over every token."""
    diffs = [
        math.exp(abs(x - y))
        for e, t in zip(engine, trainer, strict=True)
        for x, y in zip(e, t, strict=True)
    ]
    return sum(diffs) / len(diffs)
