"""Small parts of the loop: control sources, the buffer, checkpoint retention, the
stale-version check of token_mult_prob_error."""

from __future__ import annotations

import asyncio

import pytest
import torch

from workers.loop import FileControl, StaticControl
from workers.loop.buffer import TrajectoryBuffer
from workers.loop.types import ScoredGroup
from workers.policy import LoraPolicy, TrainSample, collate
from workers.policy.version_check import AdapterHistory, TokenSums, merge
from workers.rollout.base import GroupResult, Sample
from workers.spec import parse_spec


def group(step: int, versions: list[int]) -> ScoredGroup:
    samples = [Sample([1], [-0.1], [v], "stop", "x") for v in versions]
    return ScoredGroup(step, 0, "p", "a", GroupResult(f"s{step}", [1], samples), [1.0], [True])


def test_file_and_static_control(tmp_path):
    ctl = FileControl(tmp_path / "control")
    assert ctl.desired_state() == "running"
    (tmp_path / "control").write_text("paused\n")
    assert ctl.desired_state() == "paused"
    (tmp_path / "control").write_text("stop")
    with pytest.raises(ValueError, match="unknown desired state 'stop'"):
        ctl.desired_state()
    with pytest.raises(ValueError, match="unknown desired state"):
        StaticControl().set("halt")  # type: ignore[arg-type]


def test_staleness_filter_uses_the_oldest_token():
    fresh, stale = TrajectoryBuffer.filter_stale(
        [group(0, [3, 3]), group(1, [2, 3]), group(2, [1, 3])], trainer_version=3, max_staleness=1
    )
    assert [g.step for g in fresh] == [0, 1] and [g.step for g in stale] == [2]


def test_buffer_blocks_when_full_and_round_trips_its_state():
    async def go():
        buf = TrajectoryBuffer(capacity_groups=1)
        await buf.put(0, [group(0, [0])])
        blocked = asyncio.create_task(buf.put(1, [group(1, [0])]))
        await asyncio.sleep(0.01)
        assert not blocked.done()  # full: the producer waits for the trainer
        assert [g.step for g in await buf.take(0)] == [0]
        await blocked
        other = TrajectoryBuffer(4)
        other.load_state_dict(buf.state_dict())
        return other.steps()

    assert asyncio.run(go()) == [1]


def test_checkpoints_keep_last(make_spec, tmp_path):
    from workers.train import train

    train(make_spec("train.steps=3", "checkpoint.every=1", "checkpoint.keep_last=2"), tmp_path,
          progress=False)  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-2", "step-3"]


def test_merge_weights_current_and_stale_tokens_by_count():
    same = {"token_mult_prob_error": 1.5, "gen_kl_error": 0.25, "loss/total": 7.0}
    stale = TokenSums({"token_mult_prob_error": 3.0, "gen_kl_error": 0.5}, tokens=1.0)
    out = merge(same, 2.0, stale)
    # (1.5·2 + 3.0) / (2 + 1) = 2.0 and (0.25·2 + 0.5) / 3 = 1/3; other metrics untouched
    assert out["token_mult_prob_error"] == 2.0
    assert out["gen_kl_error"] == pytest.approx(1.0 / 3.0, abs=1e-15)
    assert out["loss/total"] == 7.0
    # no current-version token (the metric absent): the stale tokens alone, 3.0 / 1
    assert merge({}, 0.0, stale)["token_mult_prob_error"] == 3.0
    assert merge(same, 2.0, TokenSums.empty()) == same


def test_adapter_history_keeps_the_staleness_window():
    history = AdapterHistory(keep=1)
    for v in range(4):
        history.record(v, {"a": torch.full((2,), float(v))})
    assert [v in history for v in range(4)] == [False, False, True, True]
    assert history.get(3)["a"].tolist() == [3.0, 3.0]


def test_stale_forward_uses_the_tokens_version_and_restores_the_adapter(make_spec):
    policy = LoraPolicy(parse_spec(make_spec()), make_spec()["model"]["path"])
    history = policy.adapter.history
    history.record(0, policy.adapter_tensors())  # version 0: lora_B = 0, the base model
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.add_(0.2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    policy.adapter.version = 1
    current = policy.adapter_tensors()
    ids = policy.tokenizer.encode("12+3=15", add_special_tokens=False)
    # lp_roll := the base model's own logprobs of the response "15", labelled version 0
    probe = collate([TrainSample(ids[:5], ids[5:], [0.0, 0.0], [0, 0], 0.0)], 0)
    policy.model.eval()
    with torch.no_grad(), policy.model.disable_adapter():
        lp_base = policy.token_logprobs(probe)[0][0].tolist()
    batch = collate([TrainSample(ids[:5], ids[5:], lp_base, [0, 0], 0.0)], 0)
    sums = policy.stale_sums(policy.adapter, batch, limit=4)
    # under version 0 the trainer reproduces lp_roll: exp|Δ| = 1 on both tokens
    assert sums.tokens == 2.0
    assert sums.sums["token_mult_prob_error"] == pytest.approx(2.0, abs=1e-5)
    after = policy.adapter_tensors()
    assert all(torch.equal(after[k], current[k]) for k in current)  # version 1, bit for bit
    # six stale samples, at most two checked: 2 samples × 2 tokens
    six = collate([TrainSample(ids[:5], ids[5:], lp_base, [0, 0], 0.0)] * 6, 0)
    assert policy.stale_sums(policy.adapter, six, limit=2).tokens == 4.0
    # a version the history no longer holds is skipped, not compared with the wrong adapter
    old = collate([TrainSample(ids[:5], ids[5:], lp_base, [-5, -5], 0.0)], 0)
    assert policy.stale_sums(policy.adapter, old, limit=4).tokens == 0.0
