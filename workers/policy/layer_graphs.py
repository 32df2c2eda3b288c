"""CUDA graphs over the trainer's compiled decoder layers (train.compile on one GPU).

With the layers compiled (`LoraPolicy.compile_layers`) the GPU's work a layer is a few dozen
kernels, and the host's is the compiled graph's wrappers: dynamo's guards, AOTAutograd's
runtime, inductor's launches. On an H200 at 16×1024 tokens of the Qwen3-0.6B shape these
took about as long as the kernels they launch, so the GPU waited for the host 31 ms of a
167 ms step. Here each layer's forward and backward are captured once per input shape
(torch.cuda.make_graphed_callables: one graph forward, one backward, all layers in one
memory pool, captured in the order they run) and replayed: a layer costs the host one
replay and a copy of its input.

Only the training forward with the adapter on and without padding is graphed: grad
enabled, the layer in training mode, no KV cache, no attention mask (every row of the
micro-batch as long as the longest), the caller's `ready()` true (the policy's: its one
adapter active). Anything else (the no-grad reference and π_old forwards, the adapter off,
a batch with padding) runs the compiled layers as before. A shape is captured the
`after`-th time layer 0 meets it (a run whose batch lengths change every step never pays a
capture for a shape it will not see again), and at most `keep` shapes keep their graphs
(each holds a micro-batch's activations in its pool).

Gradients: the backward graph writes the LoRA parameters' gradients into static buffers;
autograd would make a parameter's first gradient that buffer itself (AccumulateGrad takes
an incoming gradient nobody else refers to), and the next micro-batch's replay would then
overwrite it. So before a graphed forward every LoRA parameter of the layers gets a zero
gradient where it has none (views of one zeroed buffer), and autograd adds into it; the
policy zeroes gradients in place between steps instead of dropping them, so the views are
made once. The parameters are read in place by the graphs, as the optimizer and adapter
loads write them (`copy_`): nothing is recaptured after a step or a load.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import nn

_CAPTURE_LOCK = threading.Lock()


@contextlib.contextmanager
def _thread_local_capture():
    """make_graphed_callables captures in CUDA's default "global" mode, in which another
    thread's unsafe call (a sync, a cudaMalloc) fails or invalidates the capture: in an async
    run on one GPU the engine decodes in another thread meanwhile. Its captures here take
    "thread_local" (only this thread's own unsafe calls are refused, as the decoder's own
    captures do); a call that names a mode keeps it."""
    original = torch.cuda.graph

    def graph(*args, **kwargs):
        kwargs.setdefault("capture_error_mode", "thread_local")
        return original(*args, **kwargs)

    with _CAPTURE_LOCK:
        torch.cuda.graph = graph
        try:
            yield
        finally:
            torch.cuda.graph = original


class _Layer(nn.Module):
    """One layer's call as a module of tensor arguments (what make_graphed_callables takes):
    (hidden, cos, sin) → hidden; the other keyword arguments fixed at capture."""

    def __init__(self, layer: nn.Module, call: Callable, kwargs: dict):
        super().__init__()
        self.layer = layer  # its parameters are this module's: the graphs' input surface
        self._call, self._kwargs = call, kwargs

    def forward(self, hidden, cos, sin):
        return self._call(
            hidden, attention_mask=None, position_embeddings=(cos, sin), **self._kwargs
        )


class LayerGraphs:
    """Routes each call of `layers` (compiled in place) to its CUDA graphs where it can."""

    def __init__(
        self,
        layers: nn.ModuleList,
        ready: Callable[[], bool] = lambda: True,
        after: int = 2,
        keep: int = 2,
        warmup: int = 2,
    ):
        self.layers = list(layers)
        self.ready, self.after, self.keep, self.warmup = ready, after, keep, warmup
        self.params = [p for layer in self.layers for p in layer.parameters() if p.requires_grad]
        # each layer's own call (its compiled call where it is compiled)
        self.calls = [layer._compiled_call_impl or layer._call_impl for layer in self.layers]
        self.sets: OrderedDict[tuple, list[Callable]] = OrderedDict()
        self.seen: dict[tuple, int] = {}
        self._pass: tuple | None = None  # the graphs the forward pass under way replays
        self.replays = 0  # graphed layer calls, for tests and benchmarks
        self.captures = 0
        for i, layer in enumerate(self.layers):
            layer._compiled_call_impl = functools.partial(self._call, i)

    def remove(self) -> None:
        """Back to the layers' own calls; the graphs are freed."""
        for layer, call in zip(self.layers, self.calls, strict=True):
            layer._compiled_call_impl = None if call == layer._call_impl else call
        self.sets.clear()

    def _key(self, hidden, mask, pos, kwargs) -> tuple | None:
        if not (torch.is_grad_enabled() and hidden.is_cuda and self.layers[0].training):
            return None
        if kwargs.get("past_key_values") is not None or kwargs.get("use_cache"):
            return None
        if pos is None or not isinstance(pos, tuple) or not self.ready():
            return None
        if mask is not None:
            # a batch with padding: capturing the masked attention's backward failed on an
            # H200 ("operation would make the legacy stream depend on a capturing blocking
            # stream", torch 2.11): such batches run the compiled layers alone
            return None
        cos, sin = pos
        spec = [(t.shape, t.dtype, t.requires_grad) for t in (hidden, cos, sin)]
        rest = tuple(sorted((k, type(v).__name__) for k, v in kwargs.items()))
        return (*spec, rest, torch.is_autocast_enabled("cuda"))

    def _call(self, i: int, hidden, *args, **kwargs):
        """Layer i's call: its graphs' replay where the pass is graphed, else its own call
        with the arguments as given."""
        graphed = None
        mask = kwargs.get("attention_mask")
        position_embeddings = kwargs.get("position_embeddings")
        rest = {
            k: v for k, v in kwargs.items() if k not in ("attention_mask", "position_embeddings")
        }
        if i == 0:  # a forward pass starts: its shape picks the graphs of every layer
            self._pass = None
            key = None if args else self._key(hidden, mask, position_embeddings, rest)
            if key is not None and key not in self.sets:
                self.seen[key] = self.seen.get(key, 0) + 1
                if self.seen[key] >= self.after:
                    self._capture(key, hidden, position_embeddings, rest)
            if key is not None and key in self.sets:
                self.sets.move_to_end(key)
                self._zero_grads()
                self._pass = (self.sets[key], position_embeddings)
            graphed = self._pass and self._pass[0]
        elif self._pass is not None:
            # the same pass (its rotary tables, as layer 0 had them; no mask), the input
            # a graphed layer's output, still with grad
            sets, pos = self._pass
            same = position_embeddings is pos and mask is None and not args
            if same and hidden.requires_grad and torch.is_grad_enabled():
                graphed = sets
            else:
                self._pass = None
        if graphed is None:
            return self.calls[i](hidden, *args, **kwargs)
        self.replays += 1
        cos, sin = position_embeddings
        return graphed[i](hidden, cos, sin)

    def _zero_grads(self) -> None:
        """A zero gradient for every LoRA parameter without one (see the module docstring:
        no gradient may be a graph's buffer), as views of one flat buffer: one memset, not
        a launch a parameter."""
        missing = [p for p in self.params if p.grad is None]
        if not missing:
            return
        flat = torch.zeros(sum(p.numel() for p in missing), dtype=missing[0].dtype,
                           device=missing[0].device)  # fmt: skip
        at = 0
        for p in missing:
            p.grad = flat[at : at + p.numel()].view_as(p)
            at += p.numel()

    def _capture(self, key, hidden, pos, kwargs) -> None:
        while len(self.sets) >= self.keep:  # free the least recently used shape's graphs
            self.sets.popitem(last=False)
        cos, sin = pos
        mods, samples = [], []
        for i, (layer, call) in enumerate(zip(self.layers, self.calls, strict=True)):
            mods.append(_Layer(layer, call, kwargs))
            h = hidden.detach().clone().requires_grad_(hidden.requires_grad if i == 0 else True)
            samples.append((h, cos.detach().clone(), sin.detach().clone()))
        dtype = torch.get_autocast_dtype("cuda")
        autocast = torch.is_autocast_enabled("cuda")
        # make_graphed_callables refuses autocast's weight-cast cache (a cached cast would
        # be captured and go stale): the same autocast, without the cache
        with (
            torch.autocast("cuda", dtype=dtype, enabled=autocast, cache_enabled=False),
            _thread_local_capture(),
        ):
            graphed = torch.cuda.make_graphed_callables(
                tuple(mods), tuple(samples), num_warmup_iters=self.warmup, allow_unused_input=True
            )
        self.sets[key] = list(graphed)
        self.captures += 1
