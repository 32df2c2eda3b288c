"""Runs learn in a pool: three runs of the tiny arithmetic task, each with its own seed and
some of their own settings (an advantage estimator, a learning rate, a LoRA rank, async),
trained together in one pool (workers/pool/driver.py, the torch pool engine); each run's
reward rises and its held-out eval accuracy with it, and each got a share of the trainer."""

from __future__ import annotations

import asyncio
import json
import statistics

import pytest

from workers.pool.driver import PoolDriver


@pytest.mark.slow
def test_every_run_of_a_pool_learns(make_spec, tmp_path):
    common = ("train.steps=14", "train.prompts_per_step=8", "algorithm.num_generations=8",
              "train.micro_batch_size=64", "train.eval_every=14", "data.eval_size=90")  # fmt: skip
    specs = {
        "a": make_spec(*common, "seed=1"),
        "b": make_spec(*common, "seed=2", "algorithm.advantage=rloo", "lora.r=4"),
        "c": make_spec(
            *common, "seed=3", "train.lr=0.003", "async.enabled=true", "async.max_staleness=1"
        ),  # fmt: skip
    }

    async def pooled():
        pool = PoolDriver(capacity=len(specs))
        for run, spec in specs.items():
            pool.admit(run, spec, tmp_path / run)
        members = await pool.wait()
        await pool.close()
        return members

    members = asyncio.run(pooled())
    for run in specs:
        assert members[run].outcome.state == "succeeded", members[run].error
        rows = [json.loads(x) for x in (tmp_path / run / "metrics.jsonl").open()]
        evals = [r["eval/accuracy"] for r in rows if "eval/accuracy" in r]
        rewards = [r["reward/mean"] for r in rows if "reward/mean" in r]
        assert len(rewards) == 14
        first, last = statistics.fmean(rewards[:4]), statistics.fmean(rewards[-4:])
        assert last > first + 0.05, (run, rewards)
        assert evals[-1] > evals[0] + 0.15, (run, evals)
        shares = [r["pool/share"] for r in rows if "pool/share" in r]
        assert 0 < statistics.fmean(shares) < 1  # the trainer was shared
