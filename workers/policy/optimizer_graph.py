"""The optimizer's end of the train step as one CUDA graph: gradient clipping and AdamW.

On one GPU the adapter is 392 tensors (Qwen3-0.6B, LoRA on all seven linears of 28 layers).
`clip_grad_norm_` and the fused AdamW are a handful of kernels over them, but the host's
share is not: the optimizer's per-parameter Python (state lookup, lists of grads, moments
and steps) and the foreach norms' grouping run every step, while the GPU, drained by the
loss's host syncs, waits. Captured once, the pair is one graph replay.

What a replay needs to read the right memory: the gradients at fixed addresses, so every
LoRA parameter's gradient is a view of one flat buffer, zeroed in place by `zero_grads`
(one memset) instead of dropped (autograd then adds into the views: AccumulateGrad adds in
place into a gradient that exists); the optimizer's state as the capture saw it, so the
first step runs eagerly (AdamW makes its moments there), the second captures, and
`reset()` (after an optimizer-state load, which replaces the moments) captures again; the
hyperparameters as the capture saw them (a change of lr or betas recaptures). The
optimizer must be built with `capturable=True` (its step counter on the device). The
parameters are read in place, as the adapter loads write them (`copy_`).
"""

from __future__ import annotations

import threading

import torch

# one trainer capture at a time (a pool's adapters each capture their own graph)
_CAPTURE_LOCK = threading.Lock()

# what a replay bakes in from the parameter group: a change of any recaptures
_HYPER = ("lr", "betas", "weight_decay", "eps", "amsgrad", "maximize")


class OptimizerGraph:
    """clip_grad_norm_(params, max_norm) and optimizer.step(), captured and replayed."""

    def __init__(self, params: list[torch.nn.Parameter], optimizer, max_norm: float):
        (group,) = optimizer.param_groups
        if not group.get("capturable"):
            raise ValueError("OptimizerGraph needs an optimizer built with capturable=True")
        self.params, self.optimizer, self.max_norm = params, optimizer, max_norm
        p0 = params[0]
        self.flat = torch.zeros(sum(p.numel() for p in params), dtype=p0.dtype, device=p0.device)
        self.views, at = [], 0
        for p in params:
            self.views.append(self.flat[at : at + p.numel()].view_as(p))
            at += p.numel()
        self.graph: torch.cuda.CUDAGraph | None = None
        self.norm: torch.Tensor | None = None  # the captured step's gradient norm
        self.hyper: tuple | None = None
        self.eager_steps = 0
        self.replays = 0  # for tests and benchmarks

    def zero_grads(self) -> None:
        """Every parameter's gradient is its view of the flat buffer, all zero."""
        for p, v in zip(self.params, self.views, strict=True):
            if p.grad is not v:  # dropped (zero_grad(set_to_none=True)) or replaced
                p.grad = v
        self.flat.zero_()

    def reset(self) -> None:
        """Capture again at the next step (the optimizer's state tensors were replaced)."""
        self.graph = None

    def _hyper(self) -> tuple:
        (group,) = self.optimizer.param_groups
        return tuple(group.get(k) for k in _HYPER)

    def _eager(self) -> torch.Tensor:
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)
        self.optimizer.step()
        return norm

    def step(self) -> torch.Tensor:
        """Clip and step; the gradient norm before clipping (a tensor on the device)."""
        if any(p.grad is not v for p, v in zip(self.params, self.views, strict=True)):
            self.eager_steps += 1  # gradients outside the buffer: nothing captured reads them
            return self._eager()
        if self.graph is not None and self._hyper() != self.hyper:
            self.graph = None
        if self.graph is None:
            if not self.optimizer.state:  # the first step makes the moments
                self.eager_steps += 1
                return self._eager()
            self._capture()
        self.graph.replay()
        self.replays += 1
        return self.norm

    def _capture(self) -> None:
        graph = torch.cuda.CUDAGraph()
        # captured in the thread's own mode: an engine thread may decode meanwhile (as the
        # decoder captures)
        with _CAPTURE_LOCK, torch.cuda.graph(graph, capture_error_mode="thread_local"):
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)
            self.optimizer.step()
        self.graph, self.norm, self.hyper = graph, norm, self._hyper()
