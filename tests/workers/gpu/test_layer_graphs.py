"""CUDA graphs over the compiled layers (workers/policy/layer_graphs.py, with train.compile
on one GPU, asked for with `LoraPolicy(layer_graphs=True)`): the same logprobs and the same
accumulated LoRA gradients as the compiled layers alone, over micro-batches whose gradients
accumulate, after an optimizer step and after an adapter load (the graphs read the
parameters in place); batches with padding are not graphed.

    python3 -m pytest -c /dev/null --noconftest -p no:cacheprovider -q tests/workers/gpu
"""

from __future__ import annotations

import pytest
import torch

from workers.grpo import token_mult_prob_error
from workers.policy import LoraPolicy, TrainSample, collate

from .test_fast_paths import VOCAB, make_spec, model_dir, random_adapter, rel  # noqa: F401

pytestmark = pytest.mark.gpu


def _samples(n: int, ragged: bool) -> list[TrainSample]:
    g = torch.Generator().manual_seed(5)
    out = []
    for i in range(n):
        r = 30 - (i % 3 if ragged else 0)  # ragged: padding, so an attention mask
        out.append(
            TrainSample(
                torch.randint(3, VOCAB, (12,), generator=g).tolist(),
                torch.randint(3, VOCAB, (r,), generator=g).tolist(),
                [-8.0] * r,
                [0] * r,
                1.0 if i % 2 else -0.5,
            )
        )
    return out


def _accumulate(policy: LoraPolicy, mbs) -> tuple[list[torch.Tensor], torch.Tensor]:
    policy.model.train()  # as train_step runs it: only the training forward is graphed
    policy.model.zero_grad(set_to_none=True)
    lps = []
    for mb in mbs:
        lp, _ = policy.token_logprobs(mb, share_prompts=False)
        (lp * mb.mask * mb.advantages[:, None]).sum().backward()
        lps.append(lp.detach())
    return lps, torch.cat([p.grad.flatten() for p in policy.params])


@pytest.mark.parametrize("ragged", [True, False])
def test_layer_graphs_match_compiled_layers(model_dir, ragged):  # noqa: F811
    ref = LoraPolicy(make_spec(model_dir, compile=True), model_dir, layer_graphs=False)
    fast = LoraPolicy(make_spec(model_dir, compile=True), model_dir, layer_graphs=True)
    assert ref.layer_graphs is None and fast.layer_graphs is not None
    adapter = random_adapter(ref)
    for p in (ref, fast):
        p.load_adapter_tensors(adapter, 1)
    batch = collate(_samples(12, ragged), 0).to(torch.device("cuda"))
    mbs = [batch.slice(s, s + 4) for s in (0, 4, 8)]  # one shape: captured at the second
    (ref_lps, ref_grad), (lps, grad) = _accumulate(ref, mbs), _accumulate(fast, mbs)
    graphs = fast.layer_graphs
    n_layers = len(graphs.layers)
    if ragged:  # padding (an attention mask): the compiled layers alone, nothing captured
        assert (graphs.captures, graphs.replays) == (0, 0)
        for a, b, mb in zip(ref_lps, lps, mbs, strict=True):
            assert token_mult_prob_error(a, b, mb.mask) < 1.01
        assert rel(grad, ref_grad) < 1e-2, rel(grad, ref_grad)
        return
    assert (graphs.captures, graphs.replays) == (1, 2 * n_layers)
    for a, b, mb in zip(ref_lps, lps, mbs, strict=True):
        assert token_mult_prob_error(a, b, mb.mask) < 1.01
    # three micro-batches accumulated: one through the compiled layers, two replayed (a
    # gradient counted twice, or overwritten, is off by far more than bf16 rounding)
    assert rel(grad, ref_grad) < 1e-2, rel(grad, ref_grad)
    # the same update on both: the graphs read the stepped parameters in place
    for p, q in zip(ref.params, fast.params, strict=True):
        q.grad = p.grad.clone()
    ref.optimizer.step()
    fast.optimizer.step()
    (ref_lps, ref_grad), (lps, grad) = _accumulate(ref, mbs[:1]), _accumulate(fast, mbs[:1])
    assert graphs.replays == 3 * n_layers
    assert token_mult_prob_error(ref_lps[0], lps[0], mbs[0].mask) < 1.01
    assert rel(grad, ref_grad) < 1e-2, rel(grad, ref_grad)
    # no-grad forwards (π_old, the adapter-off KL reference) are not graphed
    with torch.no_grad(), fast.model.disable_adapter():
        fast.token_logprobs(mbs[0], share_prompts=False)
    assert graphs.replays == 3 * n_layers
    # a whole step of two micro-batches of 8: the same loss and gradient norm
    train = collate(_samples(16, ragged), 0)
    outs = []
    for policy in (ref, fast):
        policy.load_adapter_tensors(adapter, 1)
        outs.append(policy.train_step(train))
    assert abs(outs[0]["loss/total"] - outs[1]["loss/total"]) <= 1e-3 * max(
        1.0, abs(outs[0]["loss/total"])
    )
    assert abs(outs[0]["grad_norm"] - outs[1]["grad_norm"]) <= 1e-2 * outs[0]["grad_norm"]
