"""Stacked LoRA on the GPU (workers/policy/stacked_lora.py, the default on one GPU): in bf16,
eager and under train.compile, the same logprobs, LoRA gradients and step loss as PEFT's own
layers, and the fused AdamW the same update as the foreach one.

    python3 -m pytest -c /dev/null --noconftest -p no:cacheprovider -q tests/workers/gpu
"""

from __future__ import annotations

import pytest
import torch

from workers.grpo import token_mult_prob_error
from workers.policy import LoraPolicy, collate

from .test_fast_paths import make_spec, model_dir, random_adapter, samples  # noqa: F401

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("compile", [False, True])
def test_stacked_policy_matches_peft_layers(model_dir, compile):  # noqa: F811
    ref = LoraPolicy(make_spec(model_dir), model_dir, stack_lora=False)
    fast = LoraPolicy(make_spec(model_dir, compile=compile), model_dir)
    assert fast.stacked and not ref.stacked  # stacked by default on one GPU
    assert fast.adapter.optimizer.defaults["fused"]
    assert not ref.adapter.optimizer.defaults["fused"]
    adapter = random_adapter(ref)
    for p in (ref, fast):
        p.load_adapter_tensors(adapter, 1)
    batch = collate(samples(12, 20, 40), 0).to(torch.device("cuda"))
    out = []
    for policy in (ref, fast):
        policy.model.zero_grad(set_to_none=True)
        lp, _ = policy.token_logprobs(batch, share_prompts=False)
        (lp * batch.mask * batch.advantages[:, None]).sum().backward()
        out.append((lp.detach(), torch.cat([p.grad.flatten() for p in policy.adapter.params])))
    assert token_mult_prob_error(out[0][0], out[1][0], batch.mask) < 1.01
    cos = torch.nn.functional.cosine_similarity(out[0][1], out[1][1], dim=0)
    assert cos > 0.999, f"stacked and PEFT LoRA gradients differ: cos {cos:.5f}"
    # the fused AdamW against foreach on the same gradients: the same update (the first
    # Adam step is ±lr wherever a gradient's sign differs, so whole steps of two bf16 paths
    # are compared by their loss, not their adapters)
    for p, q in zip(ref.adapter.params, fast.adapter.params, strict=True):
        q.grad = p.grad.clone()
    before = [p.detach().clone() for p in ref.adapter.params]
    ref.adapter.optimizer.step()
    fast.adapter.optimizer.step()
    for p, q, b in zip(ref.adapter.params, fast.adapter.params, before, strict=True):
        assert (p - b).abs().max() > 0
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-7)
    train = collate(samples(12, 20, 40), 0)
    losses = []
    for policy in (ref, fast):
        policy.load_adapter_tensors(adapter, 1)
        losses.append(policy.train_step(policy.adapter, train)["loss/total"])
    assert abs(losses[0] - losses[1]) <= 1e-2 * max(1.0, abs(losses[0])), losses
