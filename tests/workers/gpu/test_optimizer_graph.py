"""The optimizer's graph (workers/policy/optimizer_graph.py, the default with the fused AdamW on
one GPU): clip and AdamW replayed from one CUDA graph give the eager pair's parameters and
gradient norms on the same gradients, step after step, across an optimizer-state load and
an lr change; and the policy's train step runs it.

    python3 -m pytest -c /dev/null --noconftest -p no:cacheprovider -q tests/workers/gpu
"""

from __future__ import annotations

import pytest
import torch

from workers.policy import LoraPolicy, collate
from workers.policy.optimizer_graph import OptimizerGraph

from .test_fast_paths import make_spec, model_dir, random_adapter, samples  # noqa: F401

pytestmark = pytest.mark.gpu

SHAPES = [(16, 256), (512, 16), (48, 256), (256, 48), (16, 512), (1024, 16)]


def _pair(clip: float):
    g = torch.Generator(device="cuda").manual_seed(0)
    init = [torch.randn(s, device="cuda", generator=g) * 0.1 for s in SHAPES]
    eager = [torch.nn.Parameter(t.clone()) for t in init]
    graphed = [torch.nn.Parameter(t.clone()) for t in init]
    kw = dict(lr=1e-3, weight_decay=0.01, betas=(0.9, 0.99), fused=True)
    opt_e = torch.optim.AdamW(eager, **kw)
    opt_g = torch.optim.AdamW(graphed, capturable=True, **kw)
    return eager, opt_e, graphed, OptimizerGraph(graphed, opt_g, clip)


def _step(eager, opt_e, graphed, og, clip, scale, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    grads = [torch.randn(s, device="cuda", generator=g) * scale for s in SHAPES]
    og.zero_grads()
    for p, q, d in zip(eager, graphed, grads, strict=True):
        p.grad = d.clone()
        q.grad.add_(d)  # as autograd accumulates into the buffer's views
    norm_e = torch.nn.utils.clip_grad_norm_(eager, clip)
    opt_e.step()
    norm_g = og.step()
    torch.testing.assert_close(norm_g, norm_e, rtol=1e-6, atol=0)
    for p, q in zip(eager, graphed, strict=True):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-8)
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-6, atol=1e-8)  # clipped in place


def test_graphed_clip_and_adamw_match_eager():
    clip = 1.0
    eager, opt_e, graphed, og = _pair(clip)
    # scale 1 clips (norm about 30), scale 1e-3 does not
    for i, scale in enumerate([1.0, 1.0, 1e-3, 1.0]):
        _step(eager, opt_e, graphed, og, clip, scale, seed=i)
    assert (og.eager_steps, og.replays) == (1, 3)  # the first step makes the moments
    # a loaded state replaces the moments: reset, captured again, the same steps
    opt_e.load_state_dict(opt_e.state_dict())
    og.optimizer.load_state_dict(og.optimizer.state_dict())
    og.reset()
    _step(eager, opt_e, graphed, og, clip, 1.0, seed=10)
    # a new lr recaptures instead of replaying the old one
    for opt in (opt_e, og.optimizer):
        opt.param_groups[0]["lr"] = 3e-3
    _step(eager, opt_e, graphed, og, clip, 1.0, seed=11)
    assert (og.eager_steps, og.replays) == (1, 5)
    # gradients dropped by someone else (set_to_none) come back as the buffer's views
    og.optimizer.zero_grad(set_to_none=True)
    _step(eager, opt_e, graphed, og, clip, 1.0, seed=12)
    # gradients that are not the views (set by hand) take the eager path
    for q in graphed:
        q.grad = torch.zeros_like(q)
    og.step()
    assert (og.eager_steps, og.replays) == (2, 6)


def test_policy_step_replays_the_optimizer_graph(model_dir):  # noqa: F811
    eager = LoraPolicy(make_spec(model_dir), model_dir, optimizer_graph=False)
    graphed = LoraPolicy(make_spec(model_dir), model_dir)  # on by default here
    assert eager.adapter.graph is None and graphed.adapter.graph is not None
    defaults = graphed.adapter.optimizer.defaults
    assert defaults["fused"] and defaults["capturable"]
    adapter = random_adapter(eager)
    batch = collate(samples(12, 20, 40), 0)
    for p in (eager, graphed):
        p.load_adapter_tensors(adapter, 1)
    for _ in range(3):
        # the same adapter each step, so the two compare like with like (bf16 kernels with
        # atomics may differ in the last bits; Adam's first step turns those into ±lr)
        out = []
        for p in (eager, graphed):
            p.load_adapter_tensors(adapter, 1)
            out.append(p.train_step(p.adapter, batch))
        a, b = out
        assert abs(a["loss/total"] - b["loss/total"]) <= 1e-4 * max(1.0, abs(a["loss/total"]))
        assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-3 * a["grad_norm"]
    graph = graphed.adapter.graph
    assert (graph.eager_steps, graph.replays) == (1, 2)
    assert all(p.grad is v for p, v in zip(graphed.adapter.params, graph.views, strict=True))
