"""The LoRA policy: chunked logprobs, agreement with the engine, micro-batching, adapter I/O.

The step's tests run on a run alone and on the pooled path (`trainer`): a pool of one, and a
pool of three whose other two adapters (other ranks, targets, algorithms and learning
rates) step in the same forward and backward; a pooled adapter's step equals its solo
step (tests/workers/test_policy_adapters.py)."""

from __future__ import annotations

import asyncio

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from workers.adapters.update import AdapterUpdate
from workers.loop.checkpoint import load_trainer, save_trainer
from workers.policy import LoraPolicy, TrainSample, chunked_token_logprobs, collate
from workers.rollout import GroupRequest, SamplingParams, make_backend
from workers.spec import parse_spec

from .helpers import PooledTrainer


def test_chunked_logprobs_match_the_full_softmax_float64():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(10, 6, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(7, 6, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 7, (10,), generator=g)
    lp, ent = chunked_token_logprobs(hidden, targets, weight, temperature=0.7, chunk_size=3)
    full = torch.log_softmax(hidden @ weight.t() / 0.7, dim=-1)
    want = full.gather(1, targets[:, None]).squeeze(1)
    torch.testing.assert_close(lp, want)
    torch.testing.assert_close(ent, -(full.exp() * full).sum(-1).detach())
    gh, gw = torch.autograd.grad(lp.sum(), (hidden, weight))
    wh, ww = torch.autograd.grad(want.sum(), (hidden, weight))
    torch.testing.assert_close(gh, wh)
    torch.testing.assert_close(gw, ww)


def _rollout(spec, policy, n_groups=3, n=4, adapter=None):
    backend = make_backend(spec, spec.model.path)
    tok = policy.tokenizer
    prompts = ["3+4=", "12+13=", "29+1=", "7+20="][:n_groups]
    adapter = adapter or policy.adapter

    async def go():
        await backend.load_adapter(AdapterUpdate(adapter.version, policy.adapter_tensors(adapter)))
        params = SamplingParams(spec.rollout.temperature, spec.rollout.max_new_tokens)
        reqs = [GroupRequest(f"g{i}", tok.encode(p), n, i, params) for i, p in enumerate(prompts)]
        return await backend.generate(reqs)

    results = asyncio.run(go())
    return [
        TrainSample(r.prompt_ids, s.token_ids, s.logprobs, s.versions, float(i % 3) - 1.0)
        for r in results
        for i, s in enumerate(r.samples)
    ]


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_trainer_logprobs_match_the_engine(make_spec, temperature):
    spec = parse_spec(make_spec(f"rollout.temperature={temperature}"))
    policy = LoraPolicy(spec, spec.model.path)
    batch = collate(_rollout(spec, policy), policy.tokenizer.pad_token_id)
    with torch.no_grad():
        lp, _ = policy.token_logprobs(batch)
    assert ((lp - batch.lp_roll).abs() * batch.mask).max() < 1e-4


@pytest.fixture(params=["solo", "pool1", "pool3"])
def trainer(request, make_spec):
    """`trainer(spec)`: the spec's adapter alone, in a pool of one, or in a pool of three."""
    return lambda spec: PooledTrainer(request.param, spec, make_spec)


def test_micro_batching_does_not_change_the_step(make_spec, trainer):
    adapters = []
    for micro in (3, 64):
        spec = parse_spec(make_spec(f"train.micro_batch_size={micro}",
                                    "algorithm.loss_agg=seq_mean_token_mean"))  # fmt: skip
        t = trainer(spec)
        # SGD: the update is the gradient itself (Adam's first step is lr·sign(g), which
        # would amplify float32 summation-order noise in near-zero gradients).
        t.adapter.optimizer = torch.optim.SGD(t.adapter.params, lr=1.0)
        samples = _rollout(spec, t.policy, adapter=t.adapter)
        metrics = t.step(collate(samples, t.policy.tokenizer.pad_token_id))
        assert t.adapter.version == 1 and metrics["grad_norm"] > 0
        adapters.append(t.policy.adapter_tensors(t.adapter))
    for k in adapters[0]:
        torch.testing.assert_close(adapters[0][k], adapters[1][k], atol=1e-6, rtol=1e-5)


def test_decoupled_mode_with_kl_and_is(make_spec, trainer):
    spec = parse_spec(make_spec("algorithm.bypass_mode=false", "algorithm.rollout_is=sequence",
                                "algorithm.rollout_is_mode=mask", "algorithm.kl_coef=0.05",
                                "lora.dropout=0.1"))  # fmt: skip
    t = trainer(spec)
    samples = _rollout(spec, t.policy, adapter=t.adapter)
    metrics = t.step(collate(samples, t.policy.tokenizer.pad_token_id))
    assert metrics["kl"] == pytest.approx(0.0, abs=1e-6)  # adapter starts as the base
    assert "is_weight/mean" in metrics and "is_weight/bounded_frac" in metrics


def _state(t) -> tuple:
    """An adapter's checkpointed state: tensors, optimizer moments, random stream, version."""
    moments = {
        (i, k): v.clone()
        for i, s in t.policy.optimizer_state(t.adapter)["state"].items()
        for k, v in s.items()
    }
    return (
        t.policy.adapter_tensors(t.adapter),
        moments,
        t.adapter.rng.cpu.clone(),
        t.adapter.version,
    )


def _same_state(a: tuple, b: tuple) -> bool:
    return (
        a[0].keys() == b[0].keys()
        and all(torch.equal(a[0][k], b[0][k]) for k in a[0])
        and a[1].keys() == b[1].keys()
        and all(torch.equal(a[1][k], b[1][k]) for k in a[1])
        and torch.equal(a[2], b[2])
        and a[3] == b[3]
    )


def test_adapter_round_trips_through_a_checkpoint(make_spec, tmp_path, trainer):
    """The checkpoint's adapter directory loads in plain PEFT as it is; the checkpoint
    restores the adapter, its optimizer state and its stream into another policy's adapter,
    alone or pooled, bit for bit, so that the next step is the same."""
    spec = parse_spec(make_spec("lora.dropout=0.1"))
    t = trainer(spec)
    t.step(collate(_rollout(spec, t.policy, adapter=t.adapter), t.policy.tokenizer.pad_token_id))
    save_trainer(tmp_path, t.policy, t.adapter)
    saved = _state(t)
    path = tmp_path / "adapter"
    assert (path / "adapter_model.safetensors").is_file() and (
        path / "adapter_config.json"
    ).is_file()
    ids = torch.tensor([t.policy.tokenizer.encode("12+13=")])

    @torch.no_grad()
    def logits(model):  # eval mode: no dropout
        model.eval()
        try:
            return model(input_ids=ids).logits
        finally:
            model.train()

    want = logits(t.policy.activate(t.adapter))
    # Plain peft loads it as it is.
    base = AutoModelForCausalLM.from_pretrained(spec.model.path)
    torch.testing.assert_close(logits(PeftModel.from_pretrained(base, str(path))), want)
    # alone from a pool's checkpoint, pooled from a run alone's
    other = PooledTrainer("pool3" if t.kind == "solo" else "solo", spec, make_spec)
    load_trainer(tmp_path, other.policy, other.adapter)
    assert _same_state(_state(other), saved)
    # a trainer of the same kind steps on as the first does, bit for bit
    again = PooledTrainer(t.kind, spec, make_spec)
    load_trainer(tmp_path, again.policy, again.adapter)
    assert _same_state(_state(again), saved)
    torch.testing.assert_close(logits(again.policy.activate(again.adapter)), want)
    batch = collate(_rollout(spec, t.policy, adapter=t.adapter), t.policy.tokenizer.pad_token_id)
    assert again.step(batch) == t.step(batch)
    assert _same_state(_state(again), _state(t))


def test_shared_prompt_forward_equals_the_plain_forward(make_spec):
    spec = parse_spec(make_spec("rollout.temperature=0.8"))
    policy = LoraPolicy(spec, spec.model.path)
    # Give the adapter non-zero B so the LoRA path matters in both value and gradient.
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02, generator=torch.Generator().manual_seed(len(name)))
    batch = collate(_rollout(spec, policy), policy.tokenizer.pad_token_id)
    assert len({tuple(r) for r in batch.input_ids[:, :4].tolist()}) < len(batch)  # shared

    lp, _ = policy.token_logprobs(batch)  # the shared-prefix path
    (lp * batch.mask).sum().backward()
    got = {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.requires_grad}
    policy.model.zero_grad()

    logits = policy.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logp = torch.log_softmax(logits / 0.8, dim=-1)  # [B, L, V]
    at = logp.gather(1, batch.resp_pos.unsqueeze(-1).expand(-1, -1, logp.shape[-1]))
    want = at.gather(2, batch.resp_tokens.unsqueeze(-1)).squeeze(-1) * batch.mask
    torch.testing.assert_close(lp * batch.mask, want, atol=1e-5, rtol=1e-5)
    want.sum().backward()
    for n, p in policy.model.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(got[n], p.grad, atol=1e-5, rtol=1e-4, msg=n)


def test_the_training_forward_compiles_once_for_all_layers(make_spec, tmp_path):
    """train.compile (GPU) compiles each decoder layer; the training forward must not give
    dynamo a per-layer guard (a KV cache did: one recompile per layer, and past eight the
    layers silently ran eager). Traced here with the aot_eager backend, which needs no
    compiler."""
    import torch._dynamo

    from .gpu.small_qwen3 import build_small_qwen3

    model_dir = build_small_qwen3(
        tmp_path, vocab_size=256, hidden_size=64, num_hidden_layers=4,
        num_attention_heads=4, intermediate_size=128,
    )  # fmt: skip
    spec = parse_spec(make_spec(**{"model": {"path": str(model_dir), "dtype": "float32"}}))
    policy = LoraPolicy(spec, model_dir)
    for layer in policy._layers():
        layer.compile(backend="aot_eager")
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    g = torch.Generator().manual_seed(0)
    batch = collate(
        [
            TrainSample(torch.randint(3, 30, (6,), generator=g).tolist(),
                        torch.randint(3, 30, (9,), generator=g).tolist(), [-1.0] * 9, [0] * 9, 1.0)
            for _ in range(4)
        ],
        0,
    )  # fmt: skip
    lp, _ = policy.token_logprobs(batch, share_prompts=False)
    lp.sum().backward()
    assert len(policy._layers()) == 4
    # the first layer's input needs no grad, the others' do: two graphs, whatever the depth
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2
    assert all(p.grad is not None for p in policy.adapter.params)
