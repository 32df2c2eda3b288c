"""How an async run shares one GPU (workers/gpu_share.py), on the CPU: the plan (which
side's stream is served first, how the SMs split), when a run shares at all, and that the
executor it then uses trains as the plain one does; that a split's green contexts are freed
once, at the run's end (through a fake of cuda-bindings' driver: neither it nor a GPU is
here), and that compiled graphs are made before the async sides overlap. The streams
themselves and the split run on the GPU: tests/workers/gpu/test_gpu_share.py."""

from __future__ import annotations

import asyncio
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch._dynamo.utils import counters

from workers.adapters.lora import load_spec_model
from workers.gpu_share import (
    SHARE_MODES,
    SM_GRANULE,
    GpuShare,
    GreenContexts,
    make_green_contexts,
    plan_share,
    share_for,
)
from workers.loop import setup
from workers.loop.executor import LocalExecutor, StreamExecutor
from workers.policy import LoraPolicy, TrainSample
from workers.policy.batch import collate
from workers.rollout.static_decode import StaticDecoder
from workers.rollout.torch_engine import TorchBackend, draw
from workers.rollout.torch_engine.engine import warm_decoder
from workers.spec import RunSpec, parse_spec, spec_errors
from workers.train import train


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


# ---------------------------------------------------------------- green contexts' lifetime


class FakeDriver:
    """cuda-bindings' driver module as far as the split uses it (the package and a GPU are
    not here): handles are numbers, every call is logged, `fail` names a call that fails
    on its `fail_at`-th use."""

    CUresult = SimpleNamespace(CUDA_SUCCESS=0)
    CUdevResourceType = SimpleNamespace(CU_DEV_RESOURCE_TYPE_SM=1)
    CUgreenCtxCreate_flags = SimpleNamespace(CU_GREEN_CTX_DEFAULT_STREAM=1)
    CUstream_flags = SimpleNamespace(CU_STREAM_NON_BLOCKING=1)

    def __init__(self, fail: str = "", fail_at: int = 1):
        self.log: list[tuple[str, int]] = []
        self.fail, self.fail_at, self.uses = fail, fail_at, Counter()
        self.handles = iter(range(100, 1000))

    def _call(self, name: str, *out):
        self.uses[name] += 1
        if name == self.fail and self.uses[name] == self.fail_at:
            return (7, *[None] * len(out))
        return (0, *out)

    def __getattr__(self, name: str):
        if not name.startswith("cu"):
            raise AttributeError(name)

        def call(*args):
            if name in ("cuGreenCtxCreate", "cuGreenCtxStreamCreate"):
                handle = next(self.handles)
                result = self._call(name, handle)
                if result[0] == 0:
                    self.log.append((name, handle))
                return result
            if name == "cuDevSmResourceSplitByCount":
                sms = args[-1]
                group = SimpleNamespace(sm=SimpleNamespace(smCount=sms))
                return self._call(name, [group], 1, SimpleNamespace(sm=SimpleNamespace(
                    smCount=132 - sms)))  # fmt: skip
            if name in ("cuStreamSynchronize", "cuStreamDestroy", "cuGreenCtxDestroy"):
                self.log.append((name, args[0]))
                return self._call(name)
            return self._call(name, object())

        return call


def made(driver: FakeDriver, call: str) -> list[int]:
    return [h for name, h in driver.log if name == call]


def test_a_splits_green_contexts_and_streams_are_destroyed_once():
    driver = FakeDriver()
    before = GreenContexts.alive
    green, sms = make_green_contexts(driver, 0, plan_share("split", 0.36, 132))
    assert sms == (48, 84) and GreenContexts.alive == before + 2
    share = GpuShare(plan_share("split", 0.36, 132), None, None, green=green)
    share.close()
    share.close()  # idempotent: the teardown may run it again
    contexts, streams = made(driver, "cuGreenCtxCreate"), made(driver, "cuGreenCtxStreamCreate")
    assert made(driver, "cuGreenCtxDestroy") == contexts and len(contexts) == 2
    assert made(driver, "cuStreamDestroy") == streams and len(streams) == 2
    # each stream waited for and destroyed before the contexts go
    names = [name for name, _ in driver.log]
    assert names.index("cuGreenCtxDestroy") > max(
        i for i, n in enumerate(names) if n == "cuStreamDestroy"
    )
    assert GreenContexts.alive == before


def test_a_split_that_fails_halfway_destroys_what_it_made():
    driver = FakeDriver(fail="cuGreenCtxCreate", fail_at=2)
    before = GreenContexts.alive
    with pytest.raises(RuntimeError, match="CUDA driver error 7"):
        make_green_contexts(driver, 0, plan_share("split", 0.36, 132))
    assert made(driver, "cuGreenCtxDestroy") == made(driver, "cuGreenCtxCreate")
    assert made(driver, "cuStreamDestroy") == made(driver, "cuGreenCtxStreamCreate")
    assert len(made(driver, "cuGreenCtxDestroy")) == 1 and GreenContexts.alive == before


def test_a_share_without_a_split_has_nothing_to_close():
    share = GpuShare(plan_share("streams", 0.0, 0), None, None)
    share.close()
    share.close()


def test_a_run_closes_its_share_at_the_end(make_spec, tmp_path, monkeypatch):
    """The run's teardown frees the split's contexts, whether the run ends or fails. On the
    CPU nothing is shared: the share (a fake driver's contexts, no streams) is put in."""
    driver = FakeDriver()
    plan = plan_share("split", 0.36, 132)

    def fake_open(plan, device):
        green, _ = make_green_contexts(driver, 0, plan)
        return GpuShare(plan, None, None, note="fake split", green=green)

    monkeypatch.setattr(setup, "share_for", lambda spec, trainer, engine: plan)
    monkeypatch.setattr(setup, "open_share", fake_open)
    before = GreenContexts.alive
    spec = make_spec(**{"async": {"enabled": True}})
    train(spec, tmp_path / "ok", progress=False)
    assert len(made(driver, "cuGreenCtxDestroy")) == 2 and GreenContexts.alive == before

    def boom(self, adapter, batch):
        raise RuntimeError("step failed")

    monkeypatch.setattr(LoraPolicy, "train_step", boom)
    with pytest.raises(RuntimeError, match="step failed"):
        train(spec, tmp_path / "failed", progress=False)
    assert len(made(driver, "cuGreenCtxDestroy")) == 4 and GreenContexts.alive == before


# ---------------------------------------------------------------- compiled graphs first


@pytest.mark.parametrize("asynchronous", [True, False])
def test_the_warm_up_comes_before_either_side_runs_and_only_in_async(
    make_spec, tmp_path, monkeypatch, asynchronous
):
    events: list[str] = []

    def spy(cls, name):
        real = getattr(cls, name)

        def wrapped(self, *args, **kwargs):
            events.append(name)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, wrapped)

    spy(LoraPolicy, "warm_compiled")
    spy(LoraPolicy, "train_step")
    spy(TorchBackend, "generate")
    spec = make_spec(**{"async": {"enabled": asynchronous}})
    train(spec, tmp_path / "run", progress=False)
    assert "train_step" in events and "generate" in events
    if asynchronous:
        assert events[0] == "warm_compiled" and events.count("warm_compiled") == 1
    else:  # one side at a time: each compiles on its first call
        assert "warm_compiled" not in events


def test_the_trainers_warm_up_leaves_the_run_as_it_would_be(make_spec):
    """The warm-up's forwards and backwards (here eager: compile is for GPUs) take no
    optimizer step, leave no gradient and put the random state back: the next train step
    is bit-identical to that of a policy that never warmed up. Dropout on, so that the
    random state matters, and the eval-mode forward runs."""
    spec = parse_spec(make_spec(**{"lora": {"r": 8, "alpha": 16, "dropout": 0.2}}))
    g = torch.Generator().manual_seed(1)
    samples = [
        TrainSample(torch.randint(3, 30, (6,), generator=g).tolist(),
                    torch.randint(3, 30, (5,), generator=g).tolist(), [-1.0] * 5, [0] * 5,
                    float(i % 3) - 1.0)
        for i in range(8)
    ]  # fmt: skip
    out = []
    for warm in (False, True):
        torch.manual_seed(spec.seed)
        policy = LoraPolicy(spec, spec.model.path)
        policy._compiled = True  # the compiled policy's path, its layers eager on the CPU
        assert not policy.shares_prompts(collate(samples, policy.tokenizer.pad_token_id))
        if warm:
            assert policy.warm_compiled()
            assert all(p.grad is None for p in policy.adapter.params)
            assert not policy.adapter.optimizer.state and policy.adapter.version == 0
        executor = LocalExecutor(policy)
        metrics = asyncio.run(executor.train_step(samples))
        out.append((metrics, policy.adapter_tensors(), torch.rand(3)))
    (m0, a0, r0), (m1, a1, r1) = out
    assert m0 == m1 and torch.equal(r0, r1)
    assert all(torch.equal(a0[k], a1[k]) for k in a0)


def test_the_decoders_warm_up_leaves_it_empty_and_decoding_the_same(tiny_dir):
    model = load_spec_model(
        tiny_dir, parse_spec({"model": {"path": str(tiny_dir)}}), torch.device("cpu")
    )
    ids = torch.tensor([[0, 5, 6, 7], [8, 9, 10, 11]])
    attn = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    logits = []
    for warm in (False, True):
        decoder = StaticDecoder(model, max_batch=16)
        if warm:
            warm_decoder(decoder, draw, 0.7)
            assert decoder.rows == 0
        first = decoder.prefill(ids, attn)
        logits.append((first, decoder.step(first.argmax(-1))))
    assert all(torch.equal(a, b) for a, b in zip(*logits, strict=True))


def graphs() -> int:
    return counters["stats"]["unique_graphs"]


def samples_of(rows: int, prompt: int, response: int, ragged: bool, seed: int):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(rows):
        n = response - (ragged and i % 2)
        p = prompt + (ragged and i % 3)  # not ragged: every row as long, no padding
        out.append(TrainSample(torch.randint(3, 30, (p,), generator=g).tolist(),
                               torch.randint(3, 30, (n,), generator=g).tolist(), [-1.0] * n,
                               [0] * n, float(i % 3) - 1.0))  # fmt: skip
    return out


def test_after_the_trainers_warm_up_no_train_step_compiles(make_spec, monkeypatch):
    """The warm-up's shapes cover the guards of a run's steps: after it, train steps and
    no-grad forwards of other batch sizes and lengths, padded or not, and one-token
    responses compile nothing (dynamo's guards are the backend's: aot_eager stands in for
    inductor, which needs a GPU here), and no graph is refused at the recompile limit.
    KL on, dropout on: every no-grad forward a step can run."""
    torch._dynamo.reset()
    # a graph past the limit fails instead of running eager unseen
    monkeypatch.setattr(torch._dynamo.config, "fail_on_recompile_limit_hit", True)
    lora = {"r": 8, "alpha": 16, "dropout": 0.1}
    spec = parse_spec(make_spec(lora=lora, algorithm={"num_generations": 4, "kl_coef": 0.05}))
    policy = LoraPolicy(spec, spec.model.path)
    policy.compile_layers("aot_eager")
    assert policy.warm_compiled()
    warmed = graphs()
    assert warmed > 0
    pad = policy.tokenizer.pad_token_id
    for seed, (rows, prompt, response, ragged) in enumerate(
        [(16, 9, 12, True), (8, 4, 3, False), (3, 11, 1, False), (1, 2, 7, False), (5, 6, 9, True)]
    ):
        batch = collate(samples_of(rows, prompt, response, ragged, seed), pad)
        policy.train_step(policy.adapter, batch)
        policy.model.eval()  # π_old's forward (and the stale tokens' check)
        with torch.no_grad():
            policy.token_logprobs(batch, share_prompts=False)
        policy.model.train()
    assert graphs() == warmed


def test_after_the_decoders_warm_up_decoding_compiles_nothing(tiny_dir):
    """The same for the engine's compiled step halves and sampler (aot_eager on the CPU,
    where the decoder runs its step without CUDA graphs, at the live rows' count)."""
    torch._dynamo.reset()
    model = load_spec_model(tiny_dir, parse_spec({"model": {"path": str(tiny_dir)}}),
                            torch.device("cpu"))  # fmt: skip
    decoder = StaticDecoder(model, max_batch=32, compile="aot_eager")
    sampler = torch.compile(draw, backend="aot_eager")
    warm_decoder(decoder, sampler, 0.7)
    warmed = graphs()
    with torch.no_grad():  # as the backend samples
        for rows in (3, 12, 20, 2):
            ids = torch.randint(3, 30, (rows, 5))
            logits = decoder.prefill(ids, torch.ones_like(ids))
            for _ in range(2):
                u = torch.rand(rows, logits.shape[1])
                tokens, _ = sampler(logits, 0.7, u, torch.arange(rows))
                logits = decoder.step(tokens)
            sampler(logits[:1], 0.7)
    assert graphs() == warmed
