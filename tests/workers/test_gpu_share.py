"""How an async run shares one GPU (workers/loop/gpu_share.py), on the CPU: the plan (which
side's stream is served first, how the SMs split), when a run shares at all, and that the
executor it then uses trains as the plain one does. The streams themselves and the split
run on the GPU: tests/workers/gpu/test_gpu_share.py."""

from __future__ import annotations

import asyncio

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from workers.loop.executor import LocalExecutor
from workers.loop.gpu_share import SHARE_MODES, SM_GRANULE, StreamExecutor, plan_share, share_for
from workers.policy import LoraPolicy, TrainSample
from workers.spec import RunSpec, parse_spec, spec_errors


def test_priorities_serve_the_named_side_first():
    least, greatest = 0, -5
    first = plan_share("engine_first", 0.5, 132, (least, greatest))
    assert (first.engine_priority, first.trainer_priority) == (greatest, least)
    second = plan_share("trainer_first", 0.5, 132, (least, greatest))
    assert (second.engine_priority, second.trainer_priority) == (least, greatest)
    same = plan_share("streams", 0.5, 132, (least, greatest))
    assert same.engine_priority == same.trainer_priority == least
    for plan in (first, second, same):  # no split: both sides may use every SM
        assert plan.engine_sms is None and plan.trainer_sms is None


def test_the_default_split_gives_the_engine_48_of_an_h200s_132_sms():
    spec = RunSpec.model_validate({})
    plan = plan_share(spec.resources.gpu_share, spec.resources.engine_sm_share, 132)
    assert (plan.engine_sms, plan.trainer_sms) == (48, 84)


@given(st.integers(2 * SM_GRANULE, 200), st.floats(0.001, 0.999))
def test_a_split_is_whole_granules_and_leaves_each_side_one(sms, share):
    plan = plan_share("split", share, sms)
    assert plan.engine_sms % SM_GRANULE == 0
    assert plan.engine_sms >= SM_GRANULE and plan.trainer_sms >= SM_GRANULE
    assert plan.engine_sms + plan.trainer_sms == sms
    clamped = plan.engine_sms in (SM_GRANULE, (sms // SM_GRANULE - 1) * SM_GRANULE)
    assert clamped or abs(plan.engine_sms - share * sms) <= SM_GRANULE / 2


def test_bad_plans_are_refused():
    with pytest.raises(ValueError, match="unknown gpu_share 'halves'"):
        plan_share("halves", 0.5, 132)
    with pytest.raises(ValueError, match="cannot be split"):
        plan_share("split", 0.5, SM_GRANULE)
    assert set(SHARE_MODES) == {"streams", "engine_first", "trainer_first", "split"}


def test_spec_names_the_share_fields():
    assert spec_errors({"resources": {"engine_sm_share": 1.0}}) == [
        {"field": "resources.engine_sm_share", "message": "must be < 1"}
    ]
    errors = spec_errors({"resources": {"gpu_share": "halves"}})
    assert [e["field"] for e in errors] == ["resources.gpu_share"]


@pytest.mark.parametrize(
    "over, trainer, engine",
    [
        ({}, "cuda:0", "cuda:0"),  # sync: one side at a time, on the whole GPU
        ({"async": {"enabled": True}, "resources": {"engine_process": True}}, "cuda:0", "cuda:0"),
        ({"async": {"enabled": True}}, "cuda:0", "cuda:1"),  # two GPUs: nothing to share
        ({"async": {"enabled": True}}, "cpu", "cpu"),
        ({"async": {"enabled": True}, "rollout": {"backend": "vllm"}}, "cuda:0", "cuda:0"),
    ],
)
def test_only_async_in_process_on_one_gpu_shares(over, trainer, engine):
    spec = parse_spec(over)
    assert share_for(spec, torch.device(trainer), torch.device(engine)) is None


def test_the_stream_executor_without_a_stream_trains_as_the_plain_one(make_spec):
    spec = parse_spec(make_spec(**{"async": {"enabled": True}}))
    g = torch.Generator().manual_seed(0)
    samples = [
        TrainSample(torch.randint(3, 30, (6,), generator=g).tolist(),
                    torch.randint(3, 30, (5,), generator=g).tolist(), [-1.0] * 5, [0] * 5,
                    float(i % 3) - 1.0)
        for i in range(8)
    ]  # fmt: skip
    out = []
    for make in (LocalExecutor, lambda policy: StreamExecutor(policy, None)):
        torch.manual_seed(spec.seed)  # the same adapter initialisation for both
        executor = make(LoraPolicy(spec, spec.model.path))
        metrics = [asyncio.run(executor.train_step(samples)) for _ in range(2)]
        adapter = executor.policy.adapter_tensors()
        out.append((metrics, adapter, executor.adapter_version))
    (m0, a0, v0), (m1, a1, v1) = out
    assert m0 == m1 and v0 == v1 == 2
    assert a0.keys() == a1.keys() and all(torch.equal(a0[k], a1[k]) for k in a0)
