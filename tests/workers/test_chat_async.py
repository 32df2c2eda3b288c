"""The async driver on the reasoning task with the chat model: weight updates in abort mode
cut chains mid-generation, and the driver resubmits them as partials."""

from __future__ import annotations

import asyncio

import pytest

from workers.loop.lengths import length_metrics
from workers.loop.setup import run_training
from workers.policy import LoraPolicy
from workers.rollout import make_backend
from workers.spec import parse_spec

from .helpers import SlowModel
from .test_loop import RecordingExecutor, rows


def test_abort_mode_resubmits_partial_chains_and_they_keep_their_versions(
    make_spec, chat_dir, tmp_path
):
    spec = parse_spec(make_spec(
        "train.steps=4", "async.enabled=true", "async.max_staleness=1",
        "async.weight_update=abort", "rollout.max_new_tokens=48", "data.eval_size=8",
        model={"path": str(chat_dir)}, data={"task": "reasoning", "eval_size": 8},
        reward={"functions": [{"name": "math_verify"}]},
    ))  # fmt: skip
    executor = RecordingExecutor(LoraPolicy(spec, chat_dir))
    backend = make_backend(spec, chat_dir)
    # chains take tens of decode steps: slowed down, publishes land while they are in flight
    backend.source.model = SlowModel(backend.source.model, delay_s=0.03)
    calls = []
    generate = backend.generate

    async def recording(requests):
        results = await generate(requests)
        calls.append((requests, results))
        return results

    backend.generate = recording
    outcome = asyncio.run(run_training(spec, tmp_path, progress=False, executor=executor,
                                       backend=backend))  # fmt: skip
    assert outcome.state == "succeeded" and len(executor.trained) == 4

    resubmitted = [(q, r) for reqs, res in calls for q, r in zip(reqs, res, strict=True)
                   if q.partial is not None]  # fmt: skip
    assert resubmitted, "no weight update landed while chains were in flight"
    continued = 0
    for req, res in resubmitted:
        assert res.prompt_ids == req.prompt_ids
        for held, s in zip(req.partial, res.samples, strict=True):
            # a partial's tokens, logprobs and versions are kept as they were
            assert s.token_ids[: len(held.token_ids)] == held.token_ids
            assert s.logprobs[: len(held.logprobs)] == held.logprobs
            assert s.versions[: len(held.versions)] == held.versions
            if held.done:
                assert s.token_ids == held.token_ids
            elif s.done and len(s.token_ids) > len(held.token_ids):
                continued += 1
    assert continued > 0

    eos = set(backend.eos_ids)
    mixed = 0
    for trainer_version, per_sample in executor.trained:
        for versions in per_sample:
            assert versions == sorted(versions)  # a continuation never goes back a version
            assert all(0 <= trainer_version - v <= 1 for v in versions)
            mixed += len(set(versions)) > 1
    # resubmitted chains carry tokens of two versions into training
    assert mixed > 0
    for _, res in calls:
        for r in res:
            for s in r.samples:
                if s.finish_reason == "stop":
                    assert s.token_ids[-1] in eos
    metrics = rows(tmp_path)
    assert all("response_length/p90" in m for m in metrics if m["step"] > 0)


def test_length_metrics_show_the_tail():
    # lengths 1, 2, 3, 4, 10: mean 4; squared deviations 9+4+1+0+36 = 50, /5 = 10;
    # p90 by nearest rank is the ceil(0.9 * 5) = 5th value; one of five hit the limit
    got = length_metrics([3, 1, 10, 2, 4], [False, False, True, False, False])
    assert got == {
        "response_length/mean": 4.0,
        "response_length/std": pytest.approx(10**0.5),
        "response_length/p90": 10.0,
        "response_length/max": 10.0,
        "response_length/truncated_frac": 0.2,
    }
    assert length_metrics([], []) == {}
