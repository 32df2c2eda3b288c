"""A run with an environment, end to end in this process: episode metrics, samples carrying
the episode turn by turn, a pause that checkpoints the episodes in flight and a resume that
finishes the run."""

from __future__ import annotations

import json

from workers.envs import GroupProgress
from workers.loop import StaticControl
from workers.loop.checkpoint import BUFFER_CLASSES, BUFFER_FILE, read
from workers.names import EPISODE_METRICS
from workers.train import train


def env_spec(calc_dir, *extra: str) -> dict:
    from workers.spec import apply_overrides

    base = {
        "model": {"path": str(calc_dir)},
        "lora": {"r": 8, "alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
        "algorithm": {"num_generations": 4},
        "rollout": {"backend": "torch", "max_new_tokens": 40},
        "env": {"name": "calculator", "max_turns": 5, "max_episode_tokens": 200},
        "data": {"task": "environment", "eval_size": 8},
        "reward": {"functions": [{"name": "boxed_match"}]},
        "train": {"steps": 2, "prompts_per_step": 4, "lr": 2e-3, "eval_every": 0,
                  "micro_batch_size": 16, "threads": 1, "log_samples": 16},
        "seed": 5,
    }  # fmt: skip
    return apply_overrides(base, list(extra))


def test_an_env_run_reports_its_episodes(calc_dir, tmp_path):
    events = []
    outcome = train(env_spec(calc_dir), tmp_path, progress=False, on_event=events.append)
    assert outcome.state == "succeeded"
    metrics = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    for name in EPISODE_METRICS:
        assert name in metrics[-1], name
    assert metrics[-1]["episode/turns_mean"] >= 1.0
    assert metrics[-1]["episode/failed"] == 0.0
    items = [it for e in events if e.type == "samples" for it in e.items]
    assert items and all(it["turns"][0]["role"] == "model" for it in items)
    roles = {t["role"] for it in items for t in it["turns"]}
    assert "model" in roles
    for it in items:
        for t in it["turns"]:
            assert t["masked"] == (t["role"] != "model")
            if t["role"] == "model":  # the item's version is its oldest model token's
                assert t["adapter_version"] >= it["adapter_version"] >= 0
        assert it["completion"] == [t for t in it["turns"] if t["role"] == "model"][-1]["text"]


def test_a_pause_checkpoints_the_episodes_and_the_run_resumes(calc_dir, tmp_path):
    control = StaticControl()

    def on_metrics(step, values):
        if step == 1:
            control.set("paused")

    spec = env_spec(
        calc_dir, "train.steps=3", "async.enabled=true", "async.max_staleness=1",
        "resources.release_on_pause=true",
    )  # fmt: skip
    paused = train(spec, tmp_path, progress=False, control=control, on_metrics=on_metrics)
    assert paused.state == "paused" and paused.step == 1
    buffer = read(paused.checkpoint / BUFFER_FILE, BUFFER_CLASSES)  # as a resume reads it
    for kept in buffer["pending"].values():  # what the producer had in flight
        assert all(isinstance(p, GroupProgress) for p in kept)
    done = train(
        env_spec(calc_dir, "train.steps=3", "async.enabled=true", "async.max_staleness=1",
                 "checkpoint.resume_from=latest"),
        tmp_path, progress=False,
    )  # fmt: skip
    assert done.state == "succeeded" and done.step == 3
