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

Supported: the Llama-style decoders (llama, mistral, qwen2, qwen3: RMSNorm, RoPE, GQA, SwiGLU,
optional q/k/v bias and per-head q/k norms). `supports(model)` says whether a model is one.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..policy.lora import ADAPTER_NAME

SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "qwen3")
# Attention reads the cache in multiples of this many positions: reading the whole cache
# every step cost up to twice the KV traffic; each multiple is one more graph to capture.
_EXTENT_STEP = 64
_MIN_BUCKET = 8


def supports(model: nn.Module) -> str | None:
    """None if `model` (a PeftModel or a causal LM) can run here, else why not."""
    config = _causal_lm(model).config
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

    def __init__(self, modules: list[nn.Module]):
        bases = [m.base_layer if _is_lora(m) else m for m in modules]
        self.lora = [m for m in modules if _is_lora(m)]  # in the order of `modules`
        ref = bases[0].weight
        outs = [b.out_features for b in bases]
        ranks = [m.lora_A[ADAPTER_NAME].out_features for m in self.lora]
        self.width = sum(outs)
        if len(bases) == 1 and not self.lora:
            self.weight, self.bias = ref, bases[0].bias  # nothing to stack: use it as it is
        else:
            self.weight = ref.new_empty((self.width + sum(ranks), ref.shape[1]))
            has_bias = any(b.bias is not None for b in bases)
            self.bias = ref.new_zeros(self.width + sum(ranks)) if has_bias else None
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
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy the adapter's current A and B (× scaling) in, cast to the base dtype."""
        for m, (out, a_rows, b_cols) in zip(self.lora, self.blocks, strict=True):
            self.weight[a_rows].copy_(m.lora_A[ADAPTER_NAME].weight)
            self.b[out, b_cols].copy_(m.lora_B[ADAPTER_NAME].weight * m.scaling[ADAPTER_NAME])

    @property
    def params(self) -> tuple:
        """What `_fused` takes after the input: (weight, bias, B, width)."""
        return self.weight, self.bias, self.b, self.width

    def __call__(self, x: Tensor, residual: Tensor | None = None) -> Tensor:
        return _fused(x, *self.params, residual)

    def split(self, y: Tensor) -> list[Tensor]:
        return [y[:, s] for s in self.slices]


def _fused(x, weight, bias, b, width: int, residual: Tensor | None = None) -> Tensor:
    """A FusedLinear's outputs ([tokens, in] → [tokens, width]) (+ residual): two matmuls
    whatever the count of linears and adapters."""
    y = F.linear(x, weight, bias)
    if b is None:
        return y if residual is None else residual + y
    base, xa = y[:, :width], y[:, width:]
    if residual is None:
        return torch.addmm(base, xa, b.t())
    return (residual + base).addmm_(xa, b.t())


class _Layer:
    def __init__(self, layer: nn.Module, n_heads: int, n_kv: int):
        attn, mlp = layer.self_attn, layer.mlp
        self.ln1 = layer.input_layernorm
        self.ln2 = layer.post_attention_layernorm
        self.qkv = FusedLinear([attn.q_proj, attn.k_proj, attn.v_proj])
        self.o = FusedLinear([attn.o_proj])
        self.gate_up = FusedLinear([mlp.gate_proj, mlp.up_proj])
        self.down = FusedLinear([mlp.down_proj])
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

    def attn_in(self) -> tuple:
        """The tensors and constants `_attn_in` takes after its inputs."""
        return self.ln1.weight, self.eps1, self.qkv.params, self.qk_norm

    def attn_out_mlp(self) -> tuple:
        """The tensors and constants `_attn_out_mlp` takes after its inputs."""
        params = self.o.params, self.ln2.weight, self.eps2, self.gate_up.params
        return (*params, self.down.params, self.inter)


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
        attention: str = "sdpa",
        compile: str | None = None,
    ):
        why = supports(model)
        if why is not None:
            raise ValueError(f"static decode does not support this model: {why}")
        lm = _causal_lm(model)
        config = lm.config
        self.embed = lm.model.embed_tokens
        self.norm = lm.model.norm
        self.rotary = lm.model.rotary_emb
        self.head = FusedLinear([lm.lm_head])
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        self.layers = [_Layer(layer, self.n_heads, self.n_kv) for layer in lm.model.layers]
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
        if attention not in ("bmm", "sdpa"):
            raise ValueError(f"attention must be bmm or sdpa, not {attention!r}")
        # sdpa: torch's scaled_dot_product_attention with a mask (cuDNN's kernel on an H200:
        # 33.6k tokens/s at batch 256 against 31.3k, same run); bmm: batched matmuls and a
        # float32 softmax written out here, the reference the tests hold sdpa to
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

    def reserve(self, length: int) -> None:
        """Make the cache hold `length` positions a row (grown in steps of _EXTENT_STEP; a
        new cache means new graphs, so it only ever grows)."""
        if length <= self.length:
            return
        self.length = -(-length // _EXTENT_STEP) * _EXTENT_STEP
        shape = (len(self.layers), self.max_batch, self.n_kv, self.length, self.head_dim)
        self.k = self.v = None  # free the old cache before allocating the new one
        self._graphs.clear()
        self.k = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.v = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.arange = torch.arange(self.length, device=self.device)
        probe = torch.empty(0, dtype=self.dtype, device=self.device)
        cos, sin = self.rotary(probe, self.arange.unsqueeze(0))  # the model's own tables
        sign = torch.ones(self.head_dim, dtype=sin.dtype, device=self.device)
        sign[: self.head_dim // 2] = -1
        self.cos, self.sin = cos[0], sin[0] * sign  # [length, head_dim]; see _rope

    def reset(self) -> None:
        """Empty the batch (the cache keeps its size and graphs)."""
        self.rows = 0
        self.t.zero_()
        self.pad.zero_()
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

    # ---------------------------------------------------------------- prefill

    @torch.no_grad()
    def prefill(
        self, ids: Tensor, attn: Tensor, fan: Tensor | None = None, slots: list[int] | None = None
    ) -> Tensor:
        """ids, attn: [U, W] left-padded prompts and their mask. R rows of the cache take
        them, row r prompt fan[r] (default one row a prompt): the first R rows, replacing
        the batch, or the given `slots` (R batch positions, at most one past the last live
        row), the other rows keeping their sequences. Returns [R, vocab]."""
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
        self.reserve(width + 1)
        into = torch.tensor(slots, device=self.device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        cos, sin = self.cos[pos].unsqueeze(2), self.sin[pos].unsqueeze(2)  # [U, W, 1, D]
        valid = attn.bool()
        causal = torch.ones(width, width, dtype=torch.bool, device=self.device).tril()
        # a padding query sees itself: finite values (never attended to) instead of NaN
        mask = (causal & valid[:, None, :]) | torch.eye(width, dtype=torch.bool, device=self.device)
        mask = mask.unsqueeze(1)  # [U, 1, W, W]
        x = self.embed(ids).flatten(0, 1)  # [U·W, H]
        cos, sin = cos.flatten(0, 1), sin.flatten(0, 1)
        for i, layer in enumerate(self.layers):
            q, k, v = _attn_in(x, cos, sin, *layer.attn_in(), self.shape)
            q, k, v = (t.unflatten(0, (u, width)).transpose(1, 2) for t in (q, k, v))
            self.k[i, :, :, :width].index_copy_(0, into, k[fan])
            self.v[i, :, :, :width].index_copy_(0, into, v[fan])
            a = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=self.n_heads != self.n_kv
            )
            a = a.transpose(1, 2).flatten(2).flatten(0, 1)
            x = _attn_out_mlp(a, x, *layer.attn_out_mlp())
        self.pad[into] = (attn.shape[1] - attn.sum(-1))[fan]
        self.t[into] = width
        self.advance[into] = 1
        for s in slots:
            self.ends[s] = width
        self.retired.difference_update(slots)
        self.rows = max(self.rows, max(slots, default=-1) + 1)
        logits = self.head(_norm(x.view(u, width, -1)[:, -1], self.norm))
        return logits[fan]

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
        for i, layer in enumerate(self.layers):
            q, k, v = self._step_in(x, cos, sin, *layer.attn_in(), self.shape)
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
            x = self._step_out(a.reshape(n, self.n_heads * d), x, *layer.attn_out_mlp())
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
        self.ends[:n] = [self.ends[p] for p in kept]
        self.retired = {i for i, p in enumerate(kept) if p in self.retired}
        # rows past the live ones stay harmless: a valid mask, in-bounds writes
        self.pad[n:], self.t[n:], self.advance[n:] = 0, 0, 1
        self.ends[n:] = [0] * (self.max_batch - n)
        self.rows = n
