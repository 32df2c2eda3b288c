"""The GPU fast paths in bf16 against their reference: the fused logprob head against fp64,
the bf16 policy against a float32 one, and the engine's sampled logprobs against a trainer
forward of the same adapter (token_mult_prob_error ≤ 1.05, issue 10).

Self-contained (no conftest fixtures), so the GPU machine runs them as they are:
    python3 -m pytest -c /dev/null --noconftest -p no:cacheprovider -q tests/workers/gpu
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from workers.adapters.update import AdapterUpdate
from workers.grpo import token_mult_prob_error
from workers.policy import LoraPolicy, TrainSample, chunked_token_logprobs, collate, fused_logprobs
from workers.policy.fused_logprobs import fused_token_logprobs
from workers.rollout import GroupRequest, SamplingParams, decode_attention
from workers.rollout.torch_engine import TorchBackend
from workers.spec import parse_spec

from .small_qwen3 import build_small_qwen3

pytestmark = pytest.mark.gpu
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
VOCAB = 4096


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm())


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """2 layers, hidden 256, 4 heads (2 KV heads)."""
    return build_small_qwen3(
        tmp_path_factory.mktemp("qwen3-small"), vocab_size=VOCAB, hidden_size=256,
        num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
    )  # fmt: skip


def make_spec(
    model_dir: Path, dtype: str = "auto", decode: str = "auto", compile=False, rollout=None
):
    return parse_spec({
        "model": {"path": str(model_dir), "dtype": dtype},
        "lora": {"r": 16, "alpha": 32, "target_modules": TARGETS},
        "algorithm": {"num_generations": 4},
        "rollout": {"backend": "torch", "max_new_tokens": 24, "temperature": 0.9,
                    "decode": decode, **(rollout or {})},
        "train": {"micro_batch_size": 8, "logprob_chunk_size": 64, "compile": compile},
        "resources": {"trainer_gpus": 1, "rollout_gpus": 1},
    })  # fmt: skip


def random_adapter(policy: LoraPolicy) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return {
        k: torch.randn(v.shape, generator=g).to(v.dtype) * 0.05 if "lora_B" in k else v
        for k, v in policy.adapter_tensors().items()
    }


def samples(n: int, prompt_len: int, resp_len: int, shared: int = 1) -> list[TrainSample]:
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, VOCAB, (prompt_len,), generator=g).tolist() for _ in range(n)]
    out = []
    for i in range(n):
        r = resp_len - (i % 3)  # ragged responses: padding must be masked
        out.append(
            TrainSample(
                prompts[i // shared],
                torch.randint(3, VOCAB, (r,), generator=g).tolist(),
                [-8.0] * r,
                [0] * r,
                1.0 if i % 2 else -0.5,
            )
        )
    return out


@pytest.mark.parametrize("mode", ["in_place", "compiled"])
@pytest.mark.parametrize("grad_in_forward", [None, False])  # the default, or recomputed
def test_fused_logprobs_bf16_match_fp64_reference(mode, grad_in_forward):
    torch.manual_seed(0)
    n, h, v = 3000, 256, 8192
    hidden = torch.randn(n, h, device="cuda").to(torch.bfloat16).requires_grad_()
    weight = (torch.randn(v, h, device="cuda") * 0.2).to(torch.bfloat16)
    targets = torch.randint(0, v, (n,), device="cuda")
    g = torch.randn(n, device="cuda")
    lp, ent = fused_token_logprobs(
        hidden, targets, weight, 0.8, chunk_size=1024, mode=mode, grad_in_forward=grad_in_forward
    )
    assert lp.dtype == torch.float32 and not ent.requires_grad
    (lp * g).sum().backward()
    h64 = hidden.detach().double().requires_grad_()
    ref_lp, ref_ent = chunked_token_logprobs(h64, targets, weight.double(), 0.8, chunk_size=n)
    (ref_lp * g.double()).sum().backward()
    # bf16 operands are exact in fp32 products; only the fp32 accumulation differs
    assert rel(lp, ref_lp) < 1e-4
    assert rel(ent, ref_ent) < 1e-4
    assert rel(hidden.grad, h64.grad) < 1e-2  # the gradient is rounded to bf16


def test_bf16_policy_matches_float32_reference(model_dir):
    fast, ref = (
        LoraPolicy(make_spec(model_dir), model_dir),
        LoraPolicy(make_spec(model_dir, "float32"), model_dir),
    )
    base = fast.model.get_base_model().model.layers[0].mlp.up_proj
    assert base.base_layer.weight.dtype == torch.bfloat16
    assert base.lora_A["default"].weight.dtype == torch.float32  # the adapter stays fp32
    adapter = random_adapter(ref)
    fast.load_adapter_tensors(adapter, 1)
    ref.load_adapter_tensors(adapter, 1)
    for shared in (1, 4):  # one plain forward; a group's prompt shared through its KV cache
        batch = collate(samples(12, 20, 40, shared), 0).to(torch.device("cuda"))
        grads = []
        for policy in (fast, ref):
            policy.model.zero_grad(set_to_none=True)
            lp, _ = policy.token_logprobs(batch)
            (lp * batch.mask * batch.advantages[:, None]).sum().backward()
            grads.append(torch.cat([p.grad.flatten() for p in policy.adapter.params]))
            if policy is fast:
                lp_fast = lp.detach()
            else:
                lp_ref = lp.detach()
        assert token_mult_prob_error(lp_ref, lp_fast, batch.mask) < 1.02
        cos = torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0)
        assert cos > 0.99, f"LoRA gradients of bf16 and fp32 policies differ: cos {cos:.4f}"


VARIANTS = {
    "auto": {},
    "auto:bmm": {},
    "auto:sdpa": {},
    "auto:triton+compile": {"compile": True},  # auto is triton on a GPU: with compile too
    "auto:triton+8-slots": {"max_batch_size": 8},
    "auto+compile": {"compile": True},  # the step's halves and sampling compiled
    "auto+8-slots": {"max_batch_size": 8},  # 24 rows through 8 slots: continuous batching
    # the split decode attention (128 positions a program; off by default) with the steps
    # run ahead of the host (backend.overlap, the static decoder's default), compiled and
    # through 8 slots
    "auto+compile+split-ahead": {"compile": True},
    "auto+8-slots+split-ahead": {"max_batch_size": 8},
    "dynamic": {},
}


def assert_matches_trainer(policy: LoraPolicy, batch) -> None:
    """The engine's sampled logprobs in `batch` against a trainer forward of the same
    adapter: token_mult_prob_error ≤ 1.05."""
    policy.model.eval()
    with torch.no_grad():
        lp_trainer, _ = policy.token_logprobs(batch)
    err = token_mult_prob_error(batch.lp_roll, lp_trainer, batch.mask)
    assert err <= 1.05, f"token_mult_prob_error {err:.4f}"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_engine_logprobs_match_trainer_forward(model_dir, variant, monkeypatch):
    """auto = the static cache with CUDA graphs on a GPU (attention by the Triton decode
    kernel, by SDPA or by the decoder's own bmm; compiled; with fewer slots than rows; the
    split kernel with steps run ahead of the host); dynamic = PEFT's own forward."""
    decode, _, attention = variant.partition("+")[0].partition(":")
    if "split-ahead" in variant:
        monkeypatch.setitem(decode_attention.CONFIG, "CHUNK", 128)
    spec = make_spec(model_dir, decode=decode, rollout=VARIANTS[variant])
    policy = LoraPolicy(spec, model_dir)
    backend = TorchBackend(spec, model_dir)
    assert backend.overlap == (decode == "auto")  # the static decoder runs steps ahead
    backend.overlap = backend.overlap or "split-ahead" in variant
    assert (backend.decoder is not None) == (decode == "auto")
    if backend.decoder is not None:
        assert backend.decoder.graphs
        assert backend.decoder.compiled == ("compile" in variant)
        backend.decoder.attention = attention or backend.decoder.attention
    adapter = random_adapter(policy)
    policy.load_adapter_tensors(adapter, 1)
    assert asyncio.run(backend.load_adapter(AdapterUpdate(1, tensors=adapter))) == 1
    params = SamplingParams(temperature=0.9, max_new_tokens=24)
    g = torch.Generator().manual_seed(5)
    reqs = [
        GroupRequest(f"r{i}", torch.randint(3, VOCAB, (10 + i,), generator=g).tolist(), 4,
                     100 + i, params)
        for i in range(6)
    ]  # fmt: skip
    results = asyncio.run(backend.generate(reqs))
    again = asyncio.run(backend.generate(reqs))  # device noise, same seeds: same draws
    assert [s.token_ids for r in results for s in r.samples] == [
        s.token_ids for r in again for s in r.samples
    ]
    batch = collate(
        [
            TrainSample(r.prompt_ids, s.token_ids, s.logprobs, s.versions, 0.0)
            for r in results
            for s in r.samples
        ],
        policy.tokenizer.pad_token_id,
    ).to(torch.device("cuda"))
    assert int(batch.mask.sum()) > 100
    assert_matches_trainer(policy, batch)
    asyncio.run(backend.close())


def test_compiled_layers_match_the_eager_policy(model_dir):
    """train.compile: the same logprobs and LoRA gradients as the eager policy (bf16)."""
    torch._dynamo.utils.counters.clear()  # graphs compiled by the tests before this one
    fast = LoraPolicy(make_spec(model_dir, compile=True), model_dir)
    ref = LoraPolicy(make_spec(model_dir), model_dir)
    layer = fast.model.get_base_model().model.layers[0]
    assert layer._compiled_call_impl is not None  # really compiled
    adapter = random_adapter(ref)
    fast.load_adapter_tensors(adapter, 1)
    ref.load_adapter_tensors(adapter, 1)
    batch = collate(samples(12, 20, 40), 0).to(torch.device("cuda"))
    out = []
    for policy in (fast, ref):
        policy.model.zero_grad(set_to_none=True)
        lp, _ = policy.token_logprobs(batch, share_prompts=False)
        (lp * batch.mask * batch.advantages[:, None]).sum().backward()
        out.append((lp.detach(), torch.cat([p.grad.flatten() for p in policy.adapter.params])))
    assert token_mult_prob_error(out[1][0], out[0][0], batch.mask) < 1.01
    # one graph for the first layer (its input needs no grad), one for all the others (the
    # CPU test in test_policy.py holds the layers to exactly two); the head's chunk maths
    # adds a forward and a backward graph, each maybe once more for a ragged last chunk
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] <= 6
    assert fused_logprobs._COMPILED  # the head's chunk maths ran compiled
    cos = torch.nn.functional.cosine_similarity(out[0][1], out[1][1], dim=0)
    assert cos > 0.999, f"compiled and eager LoRA gradients differ: cos {cos:.5f}"


def test_a_grown_cache_captures_its_graphs_again(model_dir):
    """Rows longer than the cache grow it mid-run (reserve drops every captured graph): the
    next captures work, with the last replay's logits still alive, and sample what a fresh
    engine that never held the smaller cache samples (the heavy-tailed lengths of a long
    run; a capture into the old pool once failed the caching allocator's assert)."""
    spec = make_spec(model_dir)
    policy = LoraPolicy(spec, model_dir)
    adapter = random_adapter(policy)
    params = SamplingParams(temperature=0.9, max_new_tokens=24)
    g = torch.Generator().manual_seed(3)
    short = [GroupRequest("s", torch.randint(3, VOCAB, (8,), generator=g).tolist(), 4, 1, params)]
    long = [GroupRequest("l", torch.randint(3, VOCAB, (300,), generator=g).tolist(), 4, 2, params)]

    def engine() -> TorchBackend:
        backend = TorchBackend(spec, model_dir)
        assert asyncio.run(backend.load_adapter(AdapterUpdate(1, tensors=adapter))) == 1
        return backend

    grown = engine()
    asyncio.run(grown.generate(short))
    before = grown.decoder.length
    out = asyncio.run(grown.generate(long))
    assert grown.decoder.length > before
    fresh = engine()
    ref = asyncio.run(fresh.generate(long))
    assert [s.token_ids for r in out for s in r.samples] == [
        s.token_ids for r in ref for s in r.samples
    ]
    asyncio.run(grown.close())
    asyncio.run(fresh.close())


def test_kept_caches_go_on_with_the_trainer_forwards_logprobs(model_dir):
    """Multi-turn on the GPU path (CUDA graphs, steps run ahead of the host, bf16): each
    turn's rows keep their caches and the next turn (its prompt: the row's sequence and an
    answer) is prefilled from where the cache ends. Its sampled logprobs match a trainer
    forward of the whole sequence (token_mult_prob_error ≤ 1.05), and the turns after the
    first went on from kept caches."""
    spec = make_spec(model_dir)
    policy = LoraPolicy(spec, model_dir)
    backend = TorchBackend(spec, model_dir)
    assert backend.overlap and backend.decoder.graphs
    adapter = random_adapter(policy)
    policy.load_adapter_tensors(adapter, 1)
    assert asyncio.run(backend.load_adapter(AdapterUpdate(1, tensors=adapter))) == 1
    went_on = []
    extend = backend.decoder.extend

    def counted(slots, *args):
        went_on.append(len(slots))
        return extend(slots, *args)

    backend.decoder.extend = counted
    params = SamplingParams(temperature=0.9, max_new_tokens=24)
    g = torch.Generator().manual_seed(5)
    rows, turns = 12, 3
    reqs = [
        GroupRequest(f"r{i}", torch.randint(3, VOCAB, (10 + i,), generator=g).tolist(), 1,
                     100 + i, params, continued=True)
        for i in range(rows)
    ]  # fmt: skip
    made = []
    for turn in range(turns):
        results = asyncio.run(backend.generate(reqs))
        made += [
            TrainSample(r.prompt_ids, s.token_ids, s.logprobs, s.versions, 0.0)
            for r in results
            for s in r.samples
        ]
        reqs = [
            GroupRequest(f"r{i}-t{turn + 1}",
                         r.prompt_ids + r.samples[0].token_ids
                         + torch.randint(3, VOCAB, (5,), generator=g).tolist(),
                         1, 1000 * (turn + 1) + i, params, continued=turn + 2 < turns)
            for i, r in enumerate(results)
        ]  # fmt: skip
    assert sum(went_on) >= (turns - 1) * rows * 3 // 4
    batch = collate(made, policy.tokenizer.pad_token_id).to(torch.device("cuda"))
    assert_matches_trainer(policy, batch)
    asyncio.run(backend.close())
