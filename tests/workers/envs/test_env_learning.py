"""Tool use is learned: the suite's short form of the calculator acceptance run.

The full run (examples/calculator-tools.yaml, the demo's model: it guesses when greedy and
learns to call the tool) is measured by hand and its figures are in docs/environments.md;
here the test model (which already calls the tool, but copies the tool's answers into its
final box unreliably) trains a few steps and its reward, the episodes' success, rises."""

from __future__ import annotations

import json

import pytest

from workers.train import train

from .test_env_run import env_spec


@pytest.mark.slow
def test_episode_success_rises_with_training(calc_dir, tmp_path):
    spec = env_spec(
        calc_dir, "train.steps=24", "train.prompts_per_step=8", "algorithm.num_generations=8",
        "train.micro_batch_size=64", "train.lr=0.003", "async.enabled=true",
        "async.max_staleness=1", "env.max_turns=4",
    )  # fmt: skip
    train(spec, tmp_path, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["reward/mean"] for r in rows if "reward/mean" in r]
    first, last = sum(rewards[:6]) / 6, sum(rewards[-6:]) / 6
    assert last > first + 0.1, (first, last)
    assert all(r["episode/failed"] == 0 for r in rows if "episode/failed" in r)
