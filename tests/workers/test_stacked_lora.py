"""Stacked LoRA in the trainer (workers/policy/stacked_lora.py): the same loss and gradients
as PEFT's layers, in float32 on the CPU, with fewer than half the matmuls."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from workers.policy import LoraPolicy, TrainSample, collate
from workers.policy.stacked_lora import is_stacked, unsupported
from workers.spec import parse_spec

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}


def _build(out: Path, arch: str) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    from workers.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    config_cls, model_cls = {
        "qwen3": (Qwen3Config, Qwen3ForCausalLM),
        "llama": (LlamaConfig, LlamaForCausalLM),
    }[arch]
    config = config_cls(
        vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, intermediate_size=96, max_position_embeddings=128,
        tie_word_embeddings=True, eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    model_cls(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module", params=["qwen3", "llama"])
def model_dir(request, tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp(request.param), request.param)


def _spec(model_dir: Path, **train):
    return parse_spec({
        "model": {"path": str(model_dir)},
        "lora": {"r": 4, "alpha": 8, "target_modules": TARGETS},
        "algorithm": {"num_generations": 2, "kl_coef": 0.05},
        "rollout": {"backend": "torch", "max_new_tokens": 8},
        "train": {"micro_batch_size": 3, "lr": 1e-2, **train},
    })  # fmt: skip


def _batch(tokenizer, shared: bool):
    g = torch.Generator().manual_seed(5)
    head = torch.randint(3, 50, (5,), generator=g).tolist()
    samples = []
    for i in range(6):  # ragged, two micro-batches
        p = head if shared else torch.randint(3, 50, (4 + i % 2,), generator=g).tolist()
        r = torch.randint(3, 50, (8 - i % 3,), generator=g).tolist()
        lp = (-torch.rand(len(r), generator=g) * 3).tolist()
        samples.append(TrainSample(p, r, lp, [0] * len(r), float(i % 3) - 1.0))
    return collate(samples, tokenizer.pad_token_id)


def _policy(model_dir: Path, stacked: bool) -> LoraPolicy:
    policy = LoraPolicy(_spec(model_dir), model_dir, stack_lora=stacked)
    g = torch.Generator().manual_seed(9)  # B ≠ 0, or A's gradient is zero on both paths
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return policy


@pytest.mark.parametrize("shared", [False, True])
def test_stacked_step_matches_peft(model_dir, shared):
    # a KL term: the reference forward runs with the adapter off; `shared`: the prompt-sharing
    # forward, which threads a KV cache through the stacked attention
    ref, fast = _policy(model_dir, False), _policy(model_dir, True)
    layers = fast._layers()
    assert fast.stacked and all(map(is_stacked, layers)) and not ref.stacked
    batch = _batch(ref.tokenizer, shared)
    assert ref.shares_prompts(batch) is fast.shares_prompts(batch) is shared
    m0, m1 = ref.train_step(ref.adapter, batch), fast.train_step(fast.adapter, batch)
    for k in ("loss/total", "grad_norm", "kl"):
        assert abs(m0[k] - m1[k]) <= 1e-5 * max(1.0, abs(m0[k])), (k, m0[k], m1[k])
    g0 = {n: p.grad for n, p in ref.model.named_parameters() if p.requires_grad}
    g1 = {n: p.grad for n, p in fast.model.named_parameters() if p.requires_grad}
    assert g0.keys() == g1.keys() and len(g0) == 2 * 7 * len(layers)
    for k in g0:
        torch.testing.assert_close(g1[k], g0[k], rtol=1e-4, atol=1e-6)
    # after the optimizer step (which the stacked forward reads, nothing to refresh) and an
    # adapter load, both still compute the same logprobs
    fast.load_adapter_tensors(ref.adapter_tensors(), ref.adapter.version)
    with torch.no_grad():
        lp0, lp1 = ref.token_logprobs(batch)[0], fast.token_logprobs(batch)[0]
    torch.testing.assert_close(lp1, lp0, rtol=1e-5, atol=1e-5)
    # the base weights are views of the stacked buffers, and the adapter's keys are PEFT's
    attn = layers[0].self_attn
    assert attn.q_proj.base_layer.weight.data_ptr() == attn._stacked_qkv.data_ptr()
    assert ref.adapter_tensors().keys() == fast.adapter_tensors().keys()


class _Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += func in MATMULS
        return func(*args, **(kwargs or {}))


def test_stacked_layer_runs_fewer_than_half_the_matmuls(model_dir):
    counts = {}
    for stacked in (False, True):
        policy = _policy(model_dir, stacked)
        layer = policy._layers()[1]
        x = torch.randn(2, 6, 64, requires_grad=True)
        pos = torch.arange(6).unsqueeze(0)
        emb = policy.model.get_base_model().model.rotary_emb(x, pos)
        with _Count() as c:
            out = layer(x, attention_mask=None, position_embeddings=emb, position_ids=pos)
            out = out[0] if isinstance(out, tuple) else out
            out.square().sum().backward()
        counts[stacked] = c.n
    # PEFT: 3 forward + 5 backward a linear, seven linears; stacked: 2 + 4 a group, four
    # groups; attention's own matmuls (eager or SDPA on the CPU) the same in both
    assert counts[False] - counts[True] == 56 - 24, counts


def test_not_stacked_where_it_would_change_the_function(model_dir):
    policy = LoraPolicy(_spec(model_dir), model_dir, stack_lora=True)
    assert policy.stacked
    drop = parse_spec(_spec(model_dir).model_dump() | {"lora": {"r": 4, "alpha": 8,
        "dropout": 0.1, "target_modules": TARGETS}})  # fmt: skip
    dropped = LoraPolicy(drop, model_dir, stack_lora=True)
    assert not dropped.stacked and unsupported(dropped._layers()) == "LoRA dropout"
    some = parse_spec(_spec(model_dir).model_dump() | {"lora": {"r": 4, "alpha": 8,
        "target_modules": ["q_proj", "v_proj"]}})  # fmt: skip
    assert not LoraPolicy(some, model_dir, stack_lora=True).stacked


def test_another_adapter_runs_stacked_or_through_peft(model_dir):
    # a pool's runs are adapters added to one policy (policy.py): the active one is
    # stacked, one with dropout goes through PEFT's layers; both give PEFT's logprobs
    spec = _spec(model_dir)
    ref, fast = _policy(model_dir, False), _policy(model_dir, True)
    batch = _batch(ref.tokenizer, False)
    g = torch.Generator().manual_seed(4)
    for dropout in (0.0, 0.2):
        other = spec.model_copy(update={"lora": spec.lora.model_copy(update={"dropout": dropout})})
        tensors = None
        for policy in (ref, fast):
            adapter = policy.add_adapter(other)
            policy.activate(adapter)
            tensors = tensors or [torch.randn(p.shape, generator=g) * 0.2 for p in adapter.params]
            with torch.no_grad():
                torch._foreach_copy_(adapter.params, tensors)
            policy.model.eval()  # dropout off: the two paths draw no masks
        with torch.no_grad():
            lp0, lp1 = ref.token_logprobs(batch)[0], fast.token_logprobs(batch)[0]
            base = fast.token_logprobs(batch)[0]
            fast.activate(fast.adapter)
            own = fast.token_logprobs(batch)[0]
        torch.testing.assert_close(lp1, lp0, rtol=1e-5, atol=1e-5)
        assert (own - base).abs().max() > 1e-3  # the added adapter really took part
        ref.activate(ref.adapter)
