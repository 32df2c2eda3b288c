"""Rewards inside a real training run on the tiny model: per-term metrics, per-term columns
in the samples events, and a failing reward service failing the run by name."""

from __future__ import annotations

import json
import math

import pytest

from workers.events import Event
from workers.rewards import RewardServiceError
from workers.train import train

from ..helpers import ExampleServer
from .test_service import SERVER, free_port


def rows(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(autouse=True)
def loopback_allowed(monkeypatch):
    # `paddock train` takes its egress policy from its environment; the reference service
    # listens on loopback, which the default policy refuses
    monkeypatch.setenv("PADDOCK_EGRESS_ALLOW_NETWORKS", "127.0.0.1/32")


def test_each_term_is_logged_and_shown_per_sample(make_spec, tmp_path):
    srv = ExampleServer(SERVER)
    try:
        reward = {"functions": [
            {"name": "exact_match"},
            {"name": "numeric_match", "weight": 0.5},
            {"name": "overlong_penalty", "buffer": 2, "weight": 0.1},
            {"name": "service", "url": srv.url, "label": "judge", "weight": 0.0},
        ]}  # fmt: skip
        events: list[Event] = []
        out = tmp_path / "run"
        outcome = train(make_spec("train.steps=2", reward=reward), out, progress=False,
                        on_event=events.append)  # fmt: skip
        assert outcome.state == "succeeded"
        assert srv.requests() >= 2  # a batch a step (and none for eval: arithmetic is strict)
    finally:
        srv.stop()
    last = rows(out)[-1]
    keys = ["exact_match", "numeric_match", "overlong_penalty", "judge"]
    for k in keys:
        assert f"reward/{k}/mean" in last, k
    # the weighted sum of the per-term means is the mean of the sums
    weights = {"exact_match": 1.0, "numeric_match": 0.5, "overlong_penalty": 0.1, "judge": 0.0}
    total = sum(w * last[f"reward/{k}/mean"] for k, w in weights.items())
    assert last["reward/mean"] == pytest.approx(total)
    samples = [e for e in events if e.type == "samples"]
    assert samples
    for item in samples[-1].items:
        assert list(item["terms"]) == keys
        assert item["reward"] == pytest.approx(sum(weights[k] * item["terms"][k] for k in keys))
        assert item["details"]["overlong_penalty"]["max"] == 4
    # arithmetic keeps strict accuracy: equality of the whole completion
    assert 0.0 <= last["accuracy"] <= 1.0 and not math.isnan(last["eval/accuracy"])


def test_a_failing_reward_service_fails_the_run_naming_it(make_spec, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/score"
    reward = {"functions": [{"name": "service", "url": url, "max_retries": 1}]}
    events: list[Event] = []
    with pytest.raises(RewardServiceError, match=url):
        train(make_spec("train.steps=2", reward=reward), tmp_path / "run", progress=False,
              on_event=events.append)  # fmt: skip
    failed = [e for e in events if e.type == "status" and e.state == "failed"]
    assert failed and url in failed[-1].detail and "2 attempt(s)" in failed[-1].detail
    assert not any(e.type == "metric" and e.step > 0 for e in events)  # no step trained


def test_accuracy_of_a_dataset_comes_from_the_verifier_terms(make_spec, tmp_path):
    # a dataset of the arithmetic prompts: no strict accuracy, the verifier (numeric_match)
    # decides; the shaping term (format_regex) does not
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n"
                            for a in range(12) for b in range(12)))  # fmt: skip
    never = {"name": "format_regex", "pattern": "never", "weight": 0.5}
    reward = {"functions": [{"name": "numeric_match"}, never]}
    out = tmp_path / "run"
    spec = make_spec("train.steps=1", reward=reward,
                     data={"task": "dataset", "path": str(data), "eval_size": 8})  # fmt: skip
    train(spec, out, progress=False)
    last = rows(out)[-1]
    assert last["reward/format_regex/mean"] == 0.0
    # every sample's reward is its numeric_match score, so accuracy is the mean reward
    assert last["accuracy"] == pytest.approx(last["reward/mean"])
    assert 0.0 <= last["eval/accuracy"] <= 1.0
