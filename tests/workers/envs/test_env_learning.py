"""Tool use is learned: the suite's short form of the calculator acceptance run
(examples/calculator-tools.yaml, whose model this is: it guesses when greedy and sometimes
calls the tool when sampled). The full run's figures, on torch and vLLM, are in
docs/environments.md."""

from __future__ import annotations

import json

import pytest

from workers.train import train

from .test_env_run import env_spec


@pytest.mark.slow
def test_held_out_episode_success_rises_with_training(calc_dir, tmp_path):
    spec = env_spec(
        calc_dir, "train.steps=20", "train.prompts_per_step=8", "algorithm.num_generations=8",
        "train.micro_batch_size=64", "train.lr=0.003", "train.eval_every=20",
        "data.eval_size=48", "async.enabled=true", "async.max_staleness=1", "env.max_turns=4",
    )  # fmt: skip
    train(spec, tmp_path, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    base, final = rows[0]["eval/accuracy"], rows[-1]["eval/accuracy"]
    assert final - base >= 0.25, (base, final)  # greedy: from guessing to calling the tool
    assert rows[-1]["episode/turns_mean"] > 1.5
    assert all(r["episode/failed"] == 0 for r in rows if "episode/failed" in r)
