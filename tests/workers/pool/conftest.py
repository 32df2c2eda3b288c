"""Shared pieces of the pool tests: a run spec on the tiny model, and adapters made by the
trainer itself (a LoraPolicy whose lora_B is drawn from a seed), with the probe the version
handshake checks."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import torch

from workers.loop.executor import LocalExecutor
from workers.policy import LoraPolicy, TrainSample, collate
from workers.rollout.base import AdapterUpdate, GroupRequest, GroupResult, SamplingParams
from workers.rollout.pool_engine import PoolRequest
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
SEED_A, SEED_B, SEED_A2, SEED_A3 = 11, 22, 33, 44
RUN_LORA = LoraSpec(**LORA)


def groups(maker: AdapterMaker, tag: str) -> list[GroupRequest]:
    greedy = [
        GroupRequest(f"{tag}-g{i}", maker.ids(p), 1, i, GREEDY) for i, p in enumerate(PROMPTS)
    ]
    seeded = [
        GroupRequest(f"{tag}-s{i}", maker.ids(p), 2, 100 + i, SEEDED) for i, p in enumerate(PROMPTS)
    ]
    return greedy + seeded


def tokens(results: list[GroupResult]) -> list[list[int]]:
    return [s.token_ids for r in results for s in r.samples]


def logprobs(results: list[GroupResult]) -> list[float]:
    return [lp for r in results for s in r.samples for lp in s.logprobs]


def versions(results: list[GroupResult]) -> set[int]:
    return {v for r in results for s in r.samples for v in s.versions}


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
        self.policy.adapter_version = version
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
        self.policy.load_adapter_tensors(self.tensors[seed], self.policy.adapter_version)
        samples = [
            TrainSample(r.prompt_ids, s.token_ids, s.logprobs, s.versions, 0.0)
            for r in results
            for s in r.samples
            if s.token_ids
        ]
        batch = collate(samples, self.tok.pad_token_id)
        rollout = self.policy.spec.rollout.model_copy(update={"temperature": temperature})
        self.policy.spec = self.policy.spec.model_copy(update={"rollout": rollout})
        self.policy.model.eval()
        lp, _ = self.policy.token_logprobs(batch)
        return [lp[i, : len(s.response_ids)].tolist() for i, s in enumerate(samples)]


@pytest.fixture(scope="session")
def maker(tiny_dir: Path) -> AdapterMaker:
    return AdapterMaker(tiny_dir)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def updates(maker: AdapterMaker):
    return {
        seed: await maker.update(seed, version=1) for seed in (SEED_A, SEED_B, SEED_A2, SEED_A3)
    }


async def update_run(pool, run: str, update, mode: str = "abort") -> None:
    if run in pool.lanes:
        await pool.pause(run, mode)
        try:
            assert await pool.load_adapter(run, update, RUN_LORA) == update.version
        finally:
            await pool.resume(run)
    else:
        assert await pool.load_adapter(run, update, RUN_LORA) == update.version


def mixed(maker: AdapterMaker, runs: list[str], tag: str) -> list[PoolRequest]:
    """The runs' requests interleaved row by row, in one generate call."""
    per_run = {run: groups(maker, f"{tag}-{run}") for run in runs}
    rows = zip(*per_run.values(), strict=True)
    return [PoolRequest(run, g) for row in rows for run, g in zip(runs, row, strict=True)]


def split(reqs: list[PoolRequest], results: list[GroupResult], run: str) -> list[GroupResult]:
    return [res for q, res in zip(reqs, results, strict=True) if q.run_id == run]


async def keep_on_one_run(pool, maker: AdapterMaker, updates, streamed, n: int) -> None:
    """Run a is updated (keep) while rows of a and b decode in one batch: b's rows run on
    untouched at version 1; a's continue under version 3 once a resumes, each token's
    logprob that of the trainer's forward of the version it is labelled with. `streamed()`
    counts the tokens the engine has produced for a so far."""
    await update_run(pool, "a", maker.relabel(updates[SEED_A2], 2))
    await update_run(pool, "b", maker.relabel(updates[SEED_B], 1))
    reqs = [
        PoolRequest(run, GroupRequest(f"keep-{run}{i}", maker.ids(p), n, 7 + i, LONG))
        for i, p in enumerate(PROMPTS)
        for run in ("a", "b")
    ]
    start = streamed()
    task = asyncio.create_task(pool.generate(reqs))
    # a's rows have a few tokens each (they decode together) before the pause cuts them
    async with asyncio.timeout(120):
        while streamed() - start < 4 * n * len(PROMPTS) and not task.done():
            await asyncio.sleep(0.01)
    assert not task.done(), "generation finished before the test could interrupt it"
    await update_run(pool, "a", maker.relabel(updates[SEED_A3], 3), mode="keep")
    results = await task
    assert all(s.done for r in results for s in r.samples)  # nothing was cut short for good
    a, b = split(reqs, results, "a"), split(reqs, results, "b")
    assert versions(b) == {1}
    a_versions = [s.versions for r in a for s in r.samples]
    assert all(v == sorted(v) and set(v) <= {2, 3} for v in a_versions)
    assert any(2 in v and 3 in v for v in a_versions), "the keep pause cut no row of run a"
    lp = {seed: maker.logprobs(seed, a, LONG.temperature) for seed in (SEED_A2, SEED_A3)}
    a_samples = [s for r in a for s in r.samples if s.token_ids]
    by_label = [
        [lp[SEED_A2 if v == 2 else SEED_A3][i][t] for t, v in enumerate(s.versions)]
        for i, s in enumerate(a_samples)
    ]
    assert mean_exp_diff([s.logprobs for s in a_samples], by_label) <= 1.01
    b_samples = [s.logprobs for r in b for s in r.samples if s.token_ids]
    assert mean_exp_diff(b_samples, maker.logprobs(SEED_B, b, LONG.temperature)) <= 1.01


def mean_exp_diff(engine: list[list[float]], trainer: list[list[float]]) -> float:
    """token_mult_prob_error: mean exp|lp_engine − lp_trainer| over every token."""
    diffs = [
        math.exp(abs(x - y))
        for e, t in zip(engine, trainer, strict=True)
        for x, y in zip(e, t, strict=True)
    ]
    return sum(diffs) / len(diffs)
