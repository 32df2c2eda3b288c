"""The torch backend's fast decode: a preallocated KV cache and, on a GPU, each decode step
replayed as one CUDA graph (issue 10).

PEFT's forward costs about 3,200 kernel launches a decode step on a 28-layer model with LoRA
on every linear layer, about 90 ms of host time against 15 ms of GPU time: decoding was
launch-bound at any batch size. Here the same model runs, from the same parameters, as a
flat list of tensor operations over a cache of fixed shape, so that a step can be captured
once and replayed without Python:

- each group of linears that read the same input (q/k/v, gate/up) is one matmul over their
  stacked base weights followed by their LoRA A matrices; the model's own base parameters
  become views of the stacked buffer (no second copy). Each output's LoRA B, scaled, is then
  added to its slice in place. The adapter stays unmerged: the base bits are the trainer's.
- LoRA runs in the base dtype (bf16 on a GPU), as it does in the trainer under autocast;
  `refresh()` copies the adapter's A and B in after every load.
- each row of the batch (a slot) writes its key/value at its own cache index t_r; prompts
  admitted together are left padded to one width, so a row's position is t_r − its padding
  and one mask per step hides the padding and the future. A slot whose row has finished
  takes a new prompt (`prefill(..., slots=...)`) while the others decode on: continuous
  batching.
- graphs are kept per (batch bucket, attention extent): after finished rows are compacted
  away a smaller graph runs, and attention reads only the cache written so far, rounded up.

Per-row adapters (pools, issue 21): built with `adapters=K`, the decoder holds a slot table
of K adapters instead of the model's own: per fused linear, A stacked [K, R, in] and B
[K, out, R] (R: the linears' ranks, each padded with zeros to the pool's rank; the scale
folded into B), and each batch row carries its slot (`prefill(..., adapters=...)`). Rows of
different adapters share one step and one CUDA graph; `set_adapter(slot, tensors, scale)`
is a copy into the slot (graphs read the table, so nothing is recaptured). The LoRA delta is
gathered: every slot's A stacked under the base weight, so one matmul gives the base output
and x·A of every slot; masked to the row's own slot; one matmul with every slot's B: K times
the rank's work, in two large GEMMs (at 8 slots of rank 16 on an H200, 92 % of one
adapter's speed; a segmented kernel, rows sorted by slot and grouped GEMMs, made 64 % and
was removed: docs/pools.md).

Supported: the Llama-style decoders (llama, mistral, qwen2, qwen3: RMSNorm, RoPE, GQA, SwiGLU,
optional q/k/v bias and per-head q/k norms). `supports(model)` says whether a model (or its
config) is one.
"""

from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PretrainedConfig

from ..adapters.lora import ADAPTER_NAME
from . import kv_budget
from .decode_attention import decode_attention
from .decode_attention import works as decode_works

SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "qwen3")
# Attention reads the cache in multiples of this many positions: reading the whole cache
# every step cost up to twice the KV traffic; each multiple is one more graph to capture.
_EXTENT_STEP = 64
_MIN_BUCKET = 8
_LORA_KEY = re.compile(
    r"layers\.(?P<layer>\d+)\.(?:self_attn|mlp)\.(?P<name>\w+_proj)\.lora_(?P<ab>[AB])\.weight$"
)


def _on(t: Tensor | None, like: Tensor) -> Tensor | None:
    return None if t is None else t.to(device=like.device, dtype=like.dtype)


def supports(model: nn.Module | PretrainedConfig) -> str | None:
    """None if `model` (a PeftModel, a causal LM or its config) can run here, else why not."""
    config = _causal_lm(model).config if isinstance(model, nn.Module) else model
    if config.model_type not in SUPPORTED_TYPES:
        return f"model type {config.model_type!r} (supported: {', '.join(SUPPORTED_TYPES)})"
    # mistral's sliding window is on whenever set; qwen2/3's only with use_sliding_window
    window = getattr(config, "sliding_window", None)
    if getattr(config, "use_sliding_window", config.model_type == "mistral") and window:
        return "sliding-window attention"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r}"
    return None


def _causal_lm(model: nn.Module) -> nn.Module:
    # PeftModel → LoraModel → the transformers causal LM
    return model.base_model.model if hasattr(model, "peft_config") else model


def _is_lora(module: nn.Module) -> bool:
    return hasattr(module, "lora_A") and ADAPTER_NAME in module.lora_A


class FusedLinear:
    """Linears reading one input, as one matmul (see the module docstring). Called on a
    [tokens, in] matrix, returns their outputs side by side ([tokens, Σ out_i]); `split`
    gives one view per linear."""

    def __init__(self, modules: list[nn.Module], table: tuple[int, int] | None = None):
        """`table`: (slots, rank) for per-row adapters (a `RowLora` over every linear of the
        group, the model's own adapter ignored); None folds the model's adapter in."""
        # PEFT's LoRA wrappers hold the base linear (whatever their adapters are named)
        bases = [getattr(m, "base_layer", m) for m in modules]
        # in the order of `modules`
        self.lora = [m for m in modules if _is_lora(m)] if table is None else []
        ref = bases[0].weight
        outs = [b.out_features for b in bases]
        ranks = [m.lora_A[ADAPTER_NAME].out_features for m in self.lora]
        self.width = sum(outs)
        # the slot table's A: every slot's A rows after the base outputs, so that one
        # matmul gives the base and every slot's x·Aᵀ (as the folded adapter)
        extra = table[0] * table[1] * len(bases) if table is not None else 0
        if len(bases) == 1 and not self.lora and not extra:
            self.weight, self.bias = ref, bases[0].bias  # nothing to stack: use it as it is
        else:
            self.weight = ref.new_empty((self.width + sum(ranks) + extra, ref.shape[1]))
            self.weight[self.width :].zero_()
            has_bias = any(b.bias is not None for b in bases)
            self.bias = ref.new_zeros(self.width + sum(ranks) + extra) if has_bias else None
            at = 0
            for b in bases:  # the model's parameters now live in the stacked buffer
                rows = slice(at, at + b.out_features)
                self.weight[rows].copy_(b.weight.detach())
                b.weight.data = self.weight[rows]
                if b.bias is not None:
                    self.bias[rows].copy_(b.bias.detach())
                    b.bias.data = self.bias[rows]
                at += b.out_features
        self.slices = []
        at = 0
        for n in outs:
            self.slices.append(slice(at, at + n))
            at += n
        # x·Aᵀ of every LoRA linear lands in the rows after the base outputs; one
        # block-diagonal B (× scaling; zero for a linear without LoRA) adds them all back
        # each LoRA linear: (its output columns, its A rows in `weight`, its B columns)
        self.blocks = []
        at = 0
        for m, r in zip(self.lora, ranks, strict=True):
            a_rows = slice(self.width + at, self.width + at + r)
            self.blocks.append((self.slices[modules.index(m)], a_rows, slice(at, at + r)))
            at += r
        self.rank = sum(ranks)
        self.b = ref.new_zeros((self.width, self.rank)) if self.rank else None
        self.rows = None
        if table is not None:
            a = self.weight[self.width :].view(table[0], -1, ref.shape[1])
            self.rows = RowLora(self.slices, ref, *table, a=a)
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy the adapter's current A and B (× scaling) in, cast to the base dtype."""
        for m, (out, a_rows, b_cols) in zip(self.lora, self.blocks, strict=True):
            self.weight[a_rows].copy_(m.lora_A[ADAPTER_NAME].weight)
            self.b[out, b_cols].copy_(m.lora_B[ADAPTER_NAME].weight * m.scaling[ADAPTER_NAME])

    def params(self, route: tuple | None = None) -> tuple:
        """What `_fused` takes after the input: (weight, bias, B, width); with per-row
        adapters B is (the B table, the step's `route`)."""
        if self.rows is not None:
            return self.weight, self.bias, self.rows.lora(route), self.width
        return self.weight, self.bias, self.b, self.width

    def __call__(self, x: Tensor, residual: Tensor | None = None, route=None) -> Tensor:
        return _fused(x, *self.params(route), residual)

    def split(self, y: Tensor) -> list[Tensor]:
        return [y[:, s] for s in self.slices]


def _fused(x, weight, bias, b, width: int, residual: Tensor | None = None) -> Tensor:
    """A FusedLinear's outputs ([tokens, in] → [tokens, width]) (+ residual): two matmuls
    whatever the count of linears and adapters."""
    y = F.linear(x, weight, bias)
    if isinstance(b, tuple):  # per-row adapters: y holds every slot's x·Aᵀ after the base
        bt, route = b  # route: the one-hot [tokens, slots] of each token's slot
        slots, r_all = bt.shape[0], bt.shape[1]
        base, xa = y[:, :width], y[:, width:].view(-1, slots, r_all)
        xa = (xa * route[:, :, None]).view(-1, slots * r_all)
        bt = bt.reshape(slots * r_all, width)
        return torch.addmm(base, xa, bt) if residual is None else (residual + base).addmm_(xa, bt)
    if b is None:
        return y if residual is None else residual + y
    base, xa = y[:, :width], y[:, width:]
    # the LoRA product added as a pointwise op: compiled, it fuses into the next op (an
    # addmm onto the strided `base` copied it first, a kernel of its own: 2 a layer)
    if residual is None:
        return base + xa @ b.t()
    return residual + base + xa @ b.t()


class RowLora:
    """The slot table of one FusedLinear: `a` [slots, R, in], `b` [slots, width, R] with
    R = rank × the group's linears (linear j's A rows and B columns are block j; B is zero
    outside each linear's own outputs). A slot's rows and columns past its adapter's rank
    stay zero, so padding changes no output. B is kept as [slots, R, width] (one flat
    matmul); `b` is a view of it."""

    def __init__(self, slices: list[slice], ref: Tensor, slots: int, rank: int, a: Tensor):
        """`a`: where the A table lives (rows of the fused weight)."""
        self.slots, self.rank = slots, rank
        self.slices = slices
        width, r_all = slices[-1].stop, rank * len(slices)
        self.a = a
        self.bt = ref.new_zeros((slots, r_all, width))
        self.b = self.bt.transpose(1, 2)

    @torch.no_grad()
    def set(self, slot: int, j: int, a: Tensor | None, b: Tensor | None, scale: float) -> None:
        """Linear j of slot `slot` takes A [r, in] and B [out, r] (× scale); None: zero."""
        block = slice(j * self.rank, (j + 1) * self.rank)
        self.a[slot, block].zero_()
        self.b[slot, self.slices[j], block].zero_()
        if a is None or b is None:
            return
        r = a.shape[0]
        if r > self.rank or b.shape[1] != r:
            raise ValueError(f"an adapter of rank {r} does not fit slots of rank {self.rank}")
        self.a[slot, block][:r].copy_(a)
        self.b[slot, self.slices[j], block][:, :r].copy_(b * scale)

    def lora(self, route) -> tuple:
        # x·A comes out of the fused weight's matmul: no A needed here
        return (self.bt, route)


# each fused linear's modules, by their names in a layer (PEFT's file keys name them so)
_GROUPS = {
    "qkv": ("self_attn", ("q_proj", "k_proj", "v_proj")),
    "o": ("self_attn", ("o_proj",)),
    "gate_up": ("mlp", ("gate_proj", "up_proj")),
    "down": ("mlp", ("down_proj",)),
}


class _Layer:
    def __init__(self, layer: nn.Module, n_heads: int, n_kv: int, table=None):
        attn = layer.self_attn
        self.ln1 = layer.input_layernorm
        self.ln2 = layer.post_attention_layernorm
        for name, (part, linears) in _GROUPS.items():
            parent = getattr(layer, part)
            modules = [getattr(parent, m) for m in linears]
            setattr(self, name, FusedLinear(modules, table))
        # qwen3's per-head norms of q and k, as one norm over the q and k heads together:
        # its weight is q_norm's for each q head, then k_norm's for each k head
        self.qk_norm: tuple[Tensor, float] | None = None
        if getattr(attn, "q_norm", None) is not None:
            q, k = attn.q_norm, attn.k_norm
            weight = torch.cat([q.weight.expand(n_heads, -1), k.weight.expand(n_kv, -1)])
            self.qk_norm = (weight.detach(), _eps(q))
        self.eps1, self.eps2 = _eps(self.ln1), _eps(self.ln2)
        self.inter = self.gate_up.slices[0].stop  # gate's width: the first output

    def linears(self) -> list[FusedLinear]:
        return [self.qkv, self.o, self.gate_up, self.down]

    def attn_in(self, route=None) -> tuple:
        """The tensors and constants `_attn_in` takes after its inputs (`route`: the rows'
        adapter slots, with per-row adapters)."""
        return self.ln1.weight, self.eps1, self.qkv.params(route), self.qk_norm

    def attn_out_mlp(self, route=None) -> tuple:
        """The tensors and constants `_attn_out_mlp` takes after its inputs."""
        params = self.o.params(route), self.ln2.weight, self.eps2, self.gate_up.params(route)
        return (*params, self.down.params(route), self.inter)


def _eps(norm: nn.Module) -> float:
    return getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))


def _rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    # transformers' RMSNorm: normalise in float32, cast back, then scale (rms_norm does the
    # same in one call, one kernel where torch has a fused one)
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _norm(x: Tensor, norm: nn.Module) -> Tensor:
    return _rms(x, norm.weight, _eps(norm))


def _rope(x: Tensor, cos: Tensor, sin_signed: Tensor) -> Tensor:
    # x·cos + rotate_half(x)·sin, with rotate_half(x) = roll(x, D/2)·(−1…, +1…): the sign
    # lives in the sin table, so this is three kernels
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, -1), sin_signed)


def _scores(q: Tensor, keys_t: Tensor) -> Tensor:
    """Attention scores in float32 from bf16 operands (one kernel on CUDA)."""
    if q.is_cuda and q.dtype != torch.float32:
        return torch.bmm(q, keys_t, out_dtype=torch.float32)
    return torch.bmm(q, keys_t).float()


def _attn_in(x, cos, sin, ln, eps, qkv, qk_norm, shape):
    """[N, H] → q [N, heads, D], k and v [N, kv heads, D]: the input norm, q/k/v with
    their adapters, q and k normed per head (qwen3) and rotated, together. A pure function
    of its tensors, so that one compiled graph serves every layer."""
    heads, n_kv, d = shape
    y = _fused(_rms(x, ln, eps), *qkv)
    qk = y[:, : (heads + n_kv) * d].unflatten(-1, (heads + n_kv, d))
    v = y[:, (heads + n_kv) * d :].unflatten(-1, (n_kv, d))
    if qk_norm is not None:  # a weight per head: normalise, then scale
        weight, qk_eps = qk_norm
        qk = F.rms_norm(qk, (d,), None, qk_eps) * weight
    qk = _rope(qk, cos, sin)
    return qk[:, :heads], qk[:, heads:], v


def _attn_out_mlp(a, x, o, ln, eps, gate_up, down, inter: int):
    """x + o(a), then + the MLP of that: the rest of a layer after attention."""
    x = _fused(a, *o, x)
    gu = _fused(_rms(x, ln, eps), *gate_up)
    return _fused(F.silu(gu[:, :inter]) * gu[:, inter:], *down, x)


def _bucket(n: int, cap: int) -> int:
    return min(cap, max(_MIN_BUCKET, 1 << (n - 1).bit_length()))


class StaticDecoder:
    """Prefill and decode steps of `model` over a KV cache of fixed shape.

    `prefill(ids, attn)` runs left-padded prompts (optionally fanning each out to several
    rows), fills cache positions [0, width) of the batch's first rows, or of the given
    `slots` while the other rows keep theirs, and returns each row's last logits;
    `step(tokens)` appends one token a row, each at its own cache index, and returns the
    next logits; `compact(keep)` moves the kept rows to the front. On CUDA with `graphs`,
    steps are CUDA graph replays. Not thread-safe: the backend calls it under its step lock.
    """

    def __init__(
        self,
        model: nn.Module,
        max_batch: int,
        graphs: bool = True,
        attention: str = "auto",
        compile: str | None = None,
        adapters: int = 0,
        max_rank: int = 0,
    ):
        """`adapters` > 0: per-row adapters in a slot table of that many slots, of rank up
        to `max_rank` (rounded up to a multiple of 8: aligned GEMM shapes); the model's own
        adapter, if any, is then not used. 0: the model's adapter, folded in."""
        why = supports(model)
        if why is not None:
            raise ValueError(f"static decode does not support this model: {why}")
        lm = _causal_lm(model)
        config = lm.config
        self.embed = lm.model.embed_tokens
        self.norm = lm.model.norm
        self.rotary = lm.model.rotary_emb
        self.head = FusedLinear([lm.lm_head])
        if adapters and self.head.lora:
            raise ValueError("per-row adapters on lm_head are not supported")
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        self.adapters = adapters
        self.max_rank = -(-max_rank // 8) * 8 if adapters else 0
        table = None
        if adapters:
            if max_rank < 1:
                raise ValueError("per-row adapters need max_rank >= 1")
            table = (adapters, self.max_rank)
        self.layers = [_Layer(layer, self.n_heads, self.n_kv, table) for layer in lm.model.layers]
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.n_heads
        self.shape = (self.n_heads, self.n_kv, self.head_dim)
        # compile: a torch.compile backend ("inductor" on a GPU) for the decode step's two
        # halves around attention. They are pure functions of their tensors, so one graph
        # serves all layers; the CUDA graph then replays the fused kernels. Prefill runs
        # eager (its shapes change with every batch of prompts).
        self._step_in, self._step_out = _attn_in, _attn_out_mlp
        self.compiled = bool(compile)
        if compile:
            self._step_in = torch.compile(_attn_in, backend=compile, fullgraph=True)
            self._step_out = torch.compile(_attn_out_mlp, backend=compile, fullgraph=True)
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.max_batch = max_batch
        self.device = self.embed.weight.device
        self.dtype = self.embed.weight.dtype
        self.graphs = graphs and self.device.type == "cuda"
        if attention == "auto":  # the Triton kernel where it runs (a GPU), else SDPA
            fast = decode_works(self.device, self.dtype, self.n_heads, self.n_kv, self.head_dim)
            attention = "triton" if fast else "sdpa"
        if attention not in ("bmm", "sdpa", "triton"):
            raise ValueError(f"attention must be bmm, sdpa or triton, not {attention!r}")
        # sdpa: torch's scaled_dot_product_attention with a mask (cuDNN's kernel on an H200:
        # 33.6k tokens/s at batch 256 against 31.3k, same run); bmm: batched matmuls and a
        # float32 softmax written out here, the reference the tests hold sdpa to; triton:
        # decode steps by one kernel a layer (decode_attention.py; its torch reference
        # where Triton does not run), prefill by sdpa
        self.attention = attention
        self.length = 0  # cache positions allocated; grown by reserve()
        self.rows = 0  # rows holding sequences, at the front
        # each row's next cache index, on the host (the attention extent) and the device
        self.ends = [0] * max_batch
        self.retired: set[int] = set()
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, Tensor]] = {}
        self._pool = None
        self.t = torch.zeros(max_batch, dtype=torch.long, device=self.device)
        self.pad = torch.zeros(max_batch, dtype=torch.long, device=self.device)
        self.tokens = torch.zeros(max_batch, dtype=torch.long, device=self.device)
        self.slot_ids = torch.arange(max_batch, device=self.device)
        # each row's adapter slot (per-row adapters; rows past the live ones keep a valid 0)
        self.adapter_of = torch.zeros(max_batch, dtype=torch.long, device=self.device)
        # 1 for a row that advances a step, 0 for a retired one (finished, its slot not yet
        # taken): that row keeps writing at its index 0 instead of walking off the cache
        self.advance = torch.ones(max_batch, dtype=torch.long, device=self.device)

    @property
    def width(self) -> int:
        """The furthest cache index a live row writes next."""
        return max(self.ends[: self.rows], default=0)

    # ---------------------------------------------------------------- adapter and memory

    def refresh(self) -> None:
        """After an adapter load: take the new LoRA weights in (graphs read these buffers,
        so they need no recapture)."""
        for layer in self.layers:
            for linear in layer.linears():
                linear.refresh()
        self.head.refresh()

    @torch.no_grad()
    def set_adapter(self, slot: int, tensors: dict[str, Tensor] | None, scale: float) -> None:
        """Copy an adapter (PEFT file keys: `…layers.<i>.<self_attn|mlp>.<name>.lora_A|B
        .weight`) into slot `slot` of the table, B × `scale` (alpha / r), zero-padded to
        the table's rank; a linear the adapter does not target gets zeros. None: empty the
        slot. Rows of other slots are untouched, and graphs need no recapture."""
        if not self.adapters:
            raise RuntimeError("this decoder has no slot table (built with adapters=0)")
        if not 0 <= slot < self.adapters:
            raise ValueError(f"adapter slot {slot} is outside the table's {self.adapters}")
        found: dict[tuple[int, str, str], Tensor] = {}
        for key, value in (tensors or {}).items():
            m = _LORA_KEY.search(key)
            if m is None or int(m["layer"]) >= len(self.layers):
                raise ValueError(f"adapter key {key!r} names no linear of the decoder's layers")
            found[(int(m["layer"]), m["name"], m["ab"])] = value
        for i, layer in enumerate(self.layers):
            for group, (_, names) in _GROUPS.items():
                rows = getattr(layer, group).rows
                for j, name in enumerate(names):
                    a, b = found.get((i, name, "A")), found.get((i, name, "B"))
                    rows.set(slot, j, _on(a, rows.a), _on(b, rows.a), scale)

    def reserve(self, length: int, keep: bool = False) -> bool:
        """Make the cache hold `length` positions a row (grown in steps of _EXTENT_STEP; a
        new cache means new graphs, so it only ever grows). `keep`: the rows keep their
        sequences (copied into the new cache, which must then fit beside the old one:
        False, the cache as it was, if it does not); else the rows' caches are let go."""
        if length <= self.length:
            return True
        length = -(-length // _EXTENT_STEP) * _EXTENT_STEP
        shape = (len(self.layers), self.max_batch, self.n_kv, length, self.head_dim)
        old = getattr(self, "k", None)
        keep = keep and old is not None and self.rows > 0
        # the old cache is freed before the new one is allocated, unless it is copied over
        held = 0 if old is None or keep else 2 * old.numel() * old.element_size()
        cache = kv_budget.CacheShape(*shape, self.dtype.itemsize)
        if keep:
            try:
                kv_budget.check(self.device, cache, held)
            except kv_budget.KVCacheTooLarge:
                return False
        else:  # refuses a cache that would not fit beside the trainer's headroom
            kv_budget.check(self.device, cache, held)
        old_k, old_v, old_length = (self.k, self.v, self.length) if keep else (None, None, 0)
        self.length = length
        self.k = self.v = None  # free the old cache before allocating the new one
        self._graphs.clear()
        # a fresh pool for the next captures: once its graphs are gone the old one's use
        # count is 0 while tensors it allocated (a replay's logits) may still be alive, and
        # capturing into such a pool fails the caching allocator's internal assert
        self._pool = None
        self.k = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.v = torch.zeros(shape, dtype=self.dtype, device=self.device)
        if old_k is not None:
            self.k[..., :old_length, :] = old_k
            self.v[..., :old_length, :] = old_v
            del old_k, old_v
        self.arange = torch.arange(self.length, device=self.device)
        probe = torch.empty(0, dtype=self.dtype, device=self.device)
        cos, sin = self.rotary(probe, self.arange.unsqueeze(0))  # the model's own tables
        sign = torch.ones(self.head_dim, dtype=sin.dtype, device=self.device)
        sign[: self.head_dim // 2] = -1
        self.cos, self.sin = cos[0], sin[0] * sign  # [length, head_dim]; see _rope
        return True

    def reset(self) -> None:
        """Empty the batch (the cache keeps its size and graphs)."""
        self.rows = 0
        self.t.zero_()
        self.pad.zero_()
        self.adapter_of.zero_()
        self.advance.fill_(1)
        self.ends = [0] * self.max_batch
        self.retired = set()

    def retire(self, slots: list[int]) -> None:
        """Rows that have finished but keep their slots: they stop advancing (and stop
        counting towards the attention extent) until a prefill gives the slot a new row."""
        if not slots:
            return
        index = torch.tensor(slots, device=self.device)
        for buf in (self.t, self.pad, self.advance):
            buf[index] = 0
        for s in slots:
            self.ends[s] = 0
        self.retired.update(slots)

    def park(self, slots: list[int]) -> None:
        """Rows that have finished and keep their caches for a continuation (`extend`): they
        stop advancing where they are. Each step still writes a throwaway key and value at
        the index after a parked row's sequence, which its continuation overwrites; its
        positions go on counting towards the attention extent."""
        if not slots:
            return
        self.advance[torch.tensor(slots, device=self.device)] = 0
        self.retired.update(slots)

    # ---------------------------------------------------------------- prefill

    def _route(self, slot: Tensor):
        """The per-row adapters' routing of tokens whose slots are `slot`; None without."""
        if not self.adapters:
            return None
        return (slot[:, None] == torch.arange(self.adapters, device=slot.device)).to(self.dtype)

    def _prompt_adapters(self, adapters, u: int) -> Tensor:
        if adapters is None:
            return torch.zeros(u, dtype=torch.long, device=self.device)
        adapters = torch.as_tensor(adapters, dtype=torch.long, device=self.device)
        if adapters.shape != (u,):
            raise ValueError(f"{tuple(adapters.shape)} adapter slots for {u} prompts")
        if (
            self.adapters
            and u
            and not 0 <= int(adapters.min()) <= int(adapters.max()) < self.adapters
        ):
            raise ValueError(f"adapter slots must lie in [0, {self.adapters})")
        return adapters

    def _layers(self, ids: Tensor, attn: Tensor, adapters: Tensor, into=None, fan=None):
        """The prompts' forward through every layer ([U·W, H] out); with `into`, their
        keys and values go to those cache rows (row r: prompt fan[r])."""
        u, width = ids.shape
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        cos, sin = self.cos[pos].unsqueeze(2), self.sin[pos].unsqueeze(2)  # [U, W, 1, D]
        valid = attn.bool()
        causal = torch.ones(width, width, dtype=torch.bool, device=self.device).tril()
        # a padding query sees itself: finite values (never attended to) instead of NaN
        mask = (causal & valid[:, None, :]) | torch.eye(width, dtype=torch.bool, device=self.device)
        mask = mask.unsqueeze(1)  # [U, 1, W, W]
        x = self.embed(ids).flatten(0, 1)  # [U·W, H]
        cos, sin = cos.flatten(0, 1), sin.flatten(0, 1)
        route = self._route(adapters.repeat_interleave(width))
        for i, layer in enumerate(self.layers):
            q, k, v = _attn_in(x, cos, sin, *layer.attn_in(route), self.shape)
            q, k, v = (t.unflatten(0, (u, width)).transpose(1, 2) for t in (q, k, v))
            if into is not None:
                self.k[i, :, :, :width].index_copy_(0, into, k[fan])
                self.v[i, :, :, :width].index_copy_(0, into, v[fan])
            a = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=self.n_heads != self.n_kv
            )
            a = a.transpose(1, 2).flatten(2).flatten(0, 1)
            x = _attn_out_mlp(a, x, *layer.attn_out_mlp(route))
        return x

    @torch.no_grad()
    def score(self, ids: list[int], adapter: int = 0) -> Tensor:
        """The logits after every token of one sequence ([len, vocab]) under adapter slot
        `adapter` (the version handshake's probe), leaving the cache and batch as they
        are. The cache must hold the sequence (`reserve`)."""
        if len(ids) > self.length:
            raise RuntimeError(f"a {len(ids)}-token probe exceeds the cache ({self.length})")
        seq = torch.tensor([ids], device=self.device)
        x = self._layers(seq, torch.ones_like(seq), self._prompt_adapters([adapter], 1))
        return self.head(_norm(x, self.norm))

    @torch.no_grad()
    def prefill(
        self,
        ids: Tensor,
        attn: Tensor,
        fan: Tensor | None = None,
        slots: list[int] | None = None,
        adapters: Tensor | list[int] | None = None,
    ) -> Tensor:
        """ids, attn: [U, W] left-padded prompts and their mask. R rows of the cache take
        them, row r prompt fan[r] (default one row a prompt): the first R rows, replacing
        the batch, or the given `slots` (R batch positions, at most one past the last live
        row), the other rows keeping their sequences. `adapters` ([U]): each prompt's
        adapter slot, with per-row adapters (default 0); its rows keep it while they
        decode. Returns [R, vocab]."""
        u, width = ids.shape
        fan = torch.arange(u, device=self.device) if fan is None else fan
        rows = fan.shape[0]
        if slots is None:  # a new batch: no row keeps its sequence
            self.reset()
            slots = list(range(rows))
        if len(slots) != rows:
            raise ValueError(f"{rows} rows for {len(slots)} slots")
        if rows and max(slots) >= self.max_batch:
            raise ValueError(f"slot {max(slots)} is past the decoder's batch of {self.max_batch}")
        if width >= self.length and self.rows:
            raise RuntimeError("the cache must be reserved before rows are admitted into it")
        adapters = self._prompt_adapters(adapters, u)
        self.reserve(width + 1)
        into = torch.tensor(slots, device=self.device)
        x = self._layers(ids, attn, adapters, into, fan)
        self.adapter_of[into] = adapters[fan]
        self.pad[into] = (attn.shape[1] - attn.sum(-1))[fan]
        self.t[into] = width
        self.advance[into] = 1
        for s in slots:
            self.ends[s] = width
        self.retired.difference_update(slots)
        self.rows = max(self.rows, max(slots, default=-1) + 1)
        logits = self.head(_norm(x.view(u, width, -1)[:, -1], self.norm))
        return logits[fan]

    @torch.no_grad()
    def extend(self, slots: list[int], starts: list[int], suffixes: list[list[int]]) -> Tensor:
        """Parked rows go on (a multi-turn episode's next turn): the row at batch position
        slots[i] holds its sequence up to cache index starts[i] (exclusive); suffixes[i]
        (at least one token) is written from there, attending to the row's own cache, and
        the row decodes on under its adapter, padding and positions as they were. Returns
        each row's last logits ([R, vocab])."""
        r, lens = len(slots), [len(s) for s in suffixes]
        width = max(lens)
        end = max(s + n for s, n in zip(starts, lens, strict=True))
        if end > self.length:
            raise RuntimeError(f"a continuation to {end} exceeds the cache ({self.length})")
        if max(starts) + width > self.length:  # a shorter suffix's padding would pass the end
            return torch.cat(
                [
                    self.extend([p], [s], [x])
                    for p, s, x in zip(slots, starts, suffixes, strict=True)
                ]
            )
        need = max(starts) + width
        into = torch.tensor(slots, device=self.device)
        ids = torch.tensor([s + [0] * (width - len(s)) for s in suffixes], device=self.device)
        at = torch.tensor(starts, device=self.device)[:, None] + self.arange[:width]  # [R, W]
        pad = self.pad[into]
        pos = at - pad[:, None]
        cos, sin = self.cos[pos].flatten(0, 1)[:, None], self.sin[pos].flatten(0, 1)[:, None]
        # each query sees its row's sequence up to itself; the right padding past a
        # suffix writes keys beyond it that no query of the row reads (decode overwrites)
        span = self.arange[:need]
        mask = (span >= pad[:, None, None]) & (span <= at[:, :, None])  # [R, W, need]
        mask = mask.unsqueeze(1)
        x = self.embed(ids).flatten(0, 1)  # [R·W, H]
        route = self._route(self.adapter_of[into].repeat_interleave(width))
        for i, layer in enumerate(self.layers):
            q, k, v = _attn_in(x, cos, sin, *layer.attn_in(route), self.shape)
            q, k, v = (t.unflatten(0, (r, width)) for t in (q, k, v))  # [R, W, heads, D]
            self.k[i][into[:, None], :, at] = k
            self.v[i][into[:, None], :, at] = v
            a = F.scaled_dot_product_attention(
                q.transpose(1, 2), self.k[i][into, :, :need], self.v[i][into, :, :need],
                attn_mask=mask, scale=self.scale, enable_gqa=self.n_heads != self.n_kv,
            )  # fmt: skip
            a = a.transpose(1, 2).flatten(2).flatten(0, 1)
            x = _attn_out_mlp(a, x, *layer.attn_out_mlp(route))
        ends = [s + n for s, n in zip(starts, lens, strict=True)]
        self.t[into] = torch.tensor(ends, device=self.device)
        self.advance[into] = 1
        for p, e in zip(slots, ends, strict=True):
            self.ends[p] = e
        self.retired.difference_update(slots)
        last = torch.tensor(lens, device=self.device) - 1
        x = x.view(r, width, -1)[torch.arange(r, device=self.device), last]
        return self.head(_norm(x, self.norm))

    # ---------------------------------------------------------------- decode

    def _step(self, n: int, extent: int) -> Tensor:
        """One token for rows [0, n), each at its cache index t, attending to [0, extent)."""
        t, pad, slot = self.t[:n], self.pad[:n], self.slot_ids[:n]
        pos = t - pad  # [n]
        cos, sin = self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)  # [n, 1, D]
        span = self.arange[:extent]
        seen = (span >= pad[:, None]) & (span <= t[:, None])  # [n, extent]
        if self.attention == "bmm":
            bias = torch.zeros(seen.shape, dtype=torch.float32, device=self.device)
            # [n·kv, 1, extent]: each (row, kv head) batch's mask
            bias = bias.masked_fill(~seen, float("-inf")).repeat_interleave(self.n_kv, 0)
            bias = bias[:, None]
        group, d = self.n_heads // self.n_kv, self.head_dim
        x = self.embed(self.tokens[:n])  # [n, H]
        route = self._route(self.adapter_of[:n])  # computed in the graph: rows move
        for i, layer in enumerate(self.layers):
            q, k, v = self._step_in(x, cos, sin, *layer.attn_in(route), self.shape)
            if self.attention == "triton":  # writes k and v at t, reads [pad, t): one kernel
                a = decode_attention(q, k, v, self.k[i], self.v[i], t, pad, self.scale, extent)
                x = self._step_out(a.reshape(n, self.n_heads * d), x, *layer.attn_out_mlp(route))
                continue
            keys, values = self.k[i], self.v[i]
            keys[slot, :, t] = k  # each row's key and value at its own index
            values[slot, :, t] = v
            keys, values = keys[:n, :, :extent], values[:n, :, :extent]
            if self.attention == "sdpa":
                a = F.scaled_dot_product_attention(
                    q.unsqueeze(2), keys, values, attn_mask=seen[:, None, None],
                    scale=self.scale, enable_gqa=group > 1,
                )  # fmt: skip
            else:  # one (row, kv head) a batch: its `group` query heads against its keys
                keys = keys.reshape(n * self.n_kv, extent, d)
                values = values.reshape(n * self.n_kv, extent, d)
                q = q.reshape(n * self.n_kv, group, d)
                scores = torch.add(bias, _scores(q, keys.transpose(1, 2)), alpha=self.scale)
                weights = torch.softmax(scores, dim=-1).to(self.dtype)
                a = torch.bmm(weights, values)
            x = self._step_out(a.reshape(n, self.n_heads * d), x, *layer.attn_out_mlp(route))
        return self.head(_norm(x, self.norm))

    @torch.no_grad()
    def step(self, tokens: Tensor) -> Tensor:
        """Append `tokens` ([rows]) and return the next logits ([rows, vocab])."""
        n = self.rows
        if tokens.shape[0] != n:
            raise ValueError(f"{tokens.shape[0]} tokens for {n} rows")
        width = self.width
        if width >= self.length:
            raise RuntimeError(f"static cache full at {self.length} positions; reserve more")
        self.tokens[:n] = tokens
        extent = min(self.length, -(-(width + 1) // _EXTENT_STEP) * _EXTENT_STEP)
        if self.graphs:
            logits = self._replay(_bucket(n, self.max_batch), extent)[:n]
        else:
            logits = self._step(n, extent)
        self.t[:n] += self.advance[:n]
        if self.retired:
            self.ends[:n] = [e + (p not in self.retired) for p, e in enumerate(self.ends[:n])]
        else:
            self.ends[:n] = [e + 1 for e in self.ends[:n]]
        return logits

    def _replay(self, n: int, extent: int) -> Tensor:
        key = (n, extent)
        if key not in self._graphs:
            # warm up on a side stream (cuBLAS picks its kernels), then capture; rows past
            # the live ones compute on stale inputs and are never read
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                self._step(n, extent)
            torch.cuda.current_stream(self.device).wait_stream(side)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            # thread_local: in an async run the trainer's thread launches and allocates
            # while this one captures; in the default global mode its unsafe calls (a sync,
            # a cudaMalloc) would fail or invalidate this capture. Only this thread's own
            # unsafe calls are refused during it.
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                out = self._step(n, extent)
            self._graphs[key] = (graph, out)
        graph, out = self._graphs[key]
        graph.replay()
        return out

    @torch.no_grad()
    def compact(self, keep: Tensor) -> None:
        """Keep only rows `keep` (ascending batch positions), moved to the front."""
        kept = keep.tolist()
        n, w = len(kept), max((self.ends[p] for p in kept), default=0)
        self.k[:, :n, :, :w] = self.k[:, keep, :, :w]
        self.v[:, :n, :, :w] = self.v[:, keep, :, :w]
        self.pad[:n] = self.pad[keep].clone()
        self.t[:n] = self.t[keep].clone()
        self.advance[:n] = self.advance[keep].clone()
        self.adapter_of[:n] = self.adapter_of[keep].clone()
        self.ends[:n] = [self.ends[p] for p in kept]
        self.retired = {i for i, p in enumerate(kept) if p in self.retired}
        # rows past the live ones stay harmless: a valid mask, in-bounds writes
        self.pad[n:], self.t[n:], self.advance[n:], self.adapter_of[n:] = 0, 0, 1, 0
        self.ends[n:] = [0] * (self.max_batch - n)
        self.rows = n
