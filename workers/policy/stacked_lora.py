"""Stacked LoRA in the trainer: q/k/v as one matmul, gate/up as one, LoRA A inside it.

PEFT runs every LoRA linear as three matmuls forward (base, A, B) and five backward (the
base's input gradient, B's weight and input gradients, A's weight and input gradients): 56
a decoder layer with LoRA on all seven linears, 1,568 a step at 28 layers, each launched on
its own, most of them skinny (rank 16) and bound by reading the activations. Here the
linears that read one input form a group (q/k/v; gate/up; o; down), as the static decoder
does for generation (workers/rollout/static_decode.py, FusedLinear):

- the group's base weights live in one stacked buffer (the model's own base parameters
  become views of it, so nothing is copied);
- the group's LoRA A matrices are one matmul (x·Aᵀ for every linear), and one
  block-diagonal B (scaling folded in) rides in the base matmul's inner dimension:
  y = [x | x·Aᵀ]·[W | B]ᵀ, so the output is written once with base and LoRA parts summed
  in fp32;
- the backward is written out (`_StackedLora`): dx = [dy | dy·B]·[W ; A] in one matmul,
  and A's and B's skinny gradients; no base-weight gradient is computed.

That is 2 matmuls forward and 4 backward a group, 24 a layer instead of 56. The gradients are
PEFT's up to rounding (tests/workers/test_stacked_lora.py holds them to PEFT's forward in
float32). The LoRA parameters stay PEFT's own (the adapter's file keys, loading, the
optimizer): the stacked forward reads them at every call, so nothing has to be refreshed
after an optimizer step or a load.

Only where it is the same function as PEFT's: LoRA on all seven linears, no dropout (a
dropped-out input differs per linear), no bias on the base linears (Qwen2's q/k/v have one),
one process (FSDP2 shards the base weights). With the adapter off (the KL reference,
`disable_adapter()`) the groups run their stacked base weights alone; with another
adapter active (a pool's runs, policy.py) they stack that one, and where it has dropout, or
several are active, they fall back to PEFT's own layers, call by call.
"""

from __future__ import annotations

import sys
import types

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..adapters.lora import ADAPTER_NAME

_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")


class _StackedLora(torch.autograd.Function):
    """y = x·Wᵀ + (x·Aᵀ)·Bᵀ for a group: `weight` [out, in] the stacked frozen base, `a`
    [R, in] the stacked A, `b` [out, R] the block-diagonal B with scaling, all of x's dtype.

    The LoRA product rides in the base matmul's inner dimension: y = [x | x·Aᵀ]·[W | B]ᵀ,
    one matmul of K = in + R whose output is written once (an addmm of B onto a finished
    output reads and writes it again, and cuBLAS runs such a K = R matmul far below the
    memory bandwidth: 177 µs where a copy takes 60, measured on an H200). Backward the
    same way: dx = [dy | dy·B]·[W ; A], and the skinny dA, dB; no base-weight gradient."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, a: Tensor, b: Tensor) -> Tensor:
        xa = x @ a.t()  # [N, R]
        y = torch.cat([x, xa], 1) @ torch.cat([weight, b], 1).t()  # [N, out]
        ctx.save_for_backward(x, weight, a, b, xa)
        return y

    @staticmethod
    def backward(ctx, dy: Tensor):
        x, weight, a, b, xa = ctx.saved_tensors
        dxa = dy @ b  # [N, R]
        db = dy.t() @ xa  # [out, R]; only its diagonal blocks reach the parameters
        da = dxa.t() @ x  # [R, in]
        dx = None
        if ctx.needs_input_grad[0]:
            dx = torch.cat([dy, dxa], 1) @ torch.cat([weight, a])  # [N, in]
        return dx, None, da, db


def _active(mods: tuple[nn.Module, ...]) -> str | None:
    """The adapter the group runs stacked: its one active adapter; "" with the adapter off
    (the base alone); None where only PEFT's own forward computes the same function (several
    adapters active, or one with dropout or DoRA, as a pool's added adapters may be)."""
    if mods[0].disable_adapters or mods[0].merged:
        return ""
    names = mods[0].active_adapters
    if len(names) != 1:
        return None
    name = names[0]
    for m in mods:
        if name not in m.lora_A or not isinstance(m.lora_dropout[name], nn.Identity):
            return None
        if getattr(m, "use_dora", {}).get(name, False):
            return None
    return name


def _group(x: Tensor, weight: Tensor, mods: tuple[nn.Module, ...]) -> Tensor:
    """The group's outputs side by side ([..., in] → [..., Σ out])."""
    name = _active(mods)
    if name == "":
        return F.linear(x, weight)
    if name is None:
        return torch.cat([m(x) for m in mods], -1)
    a = torch.cat([m.lora_A[name].weight for m in mods]).to(x.dtype)
    b = torch.block_diag(*[m.lora_B[name].weight * m.scaling[name] for m in mods]).to(x.dtype)
    lead = x.shape[:-1]
    y = _StackedLora.apply(x.reshape(-1, x.shape[-1]), weight, a, b)
    return y.view(*lead, y.shape[-1])


def _stack_bases(mods: list[nn.Module]) -> Tensor:
    """One buffer holding the modules' base weights one after the other; each module's own
    base weight becomes a view of its rows (as FusedLinear does in the decoder)."""
    bases = [m.base_layer for m in mods]
    if len(bases) == 1:
        return bases[0].weight
    ref = bases[0].weight
    stacked = ref.new_empty((sum(b.out_features for b in bases), ref.shape[1]))
    at = 0
    with torch.no_grad():
        for b in bases:
            rows = slice(at, at + b.out_features)
            stacked[rows].copy_(b.weight)
            b.weight.data = stacked[rows]
            at += b.out_features
    return stacked


def _attention_forward(
    self, hidden_states, position_embeddings, attention_mask, past_key_values=None, **kwargs
):
    """transformers' Llama/Qwen3 attention forward with q/k/v as one group and o as one."""
    mod = sys.modules[type(self).__module__]  # the model's own rope and attention functions
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    qkv = _group(hidden_states, self._stacked_qkv, (self.q_proj, self.k_proj, self.v_proj))
    q, k, v = (t.view(hidden_shape) for t in qkv.split(self._stacked_widths, dim=-1))
    if hasattr(self, "q_norm"):  # qwen3's per-head norms
        q, k = self.q_norm(q), self.k_norm(k)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    cos, sin = position_embeddings
    q, k = mod.apply_rotary_pos_emb(q, k, cos, sin)
    if past_key_values is not None:
        k, v = past_key_values.update(k, v, self.layer_idx)
    attend = mod.ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, mod.eager_attention_forward
    )
    if hasattr(self, "sliding_window"):
        kwargs["sliding_window"] = self.sliding_window
    out, weights = attend(
        self,
        q,
        k,
        v,
        attention_mask,
        dropout=0.0 if not self.training else self.attention_dropout,
        scaling=self.scaling,
        **kwargs,
    )
    out = out.reshape(*input_shape, -1).contiguous()
    return _group(out, self.o_proj.base_layer.weight, (self.o_proj,)), weights


def _mlp_forward(self, x):
    gate_up = _group(x, self._stacked_gate_up, (self.gate_proj, self.up_proj))
    gate, up = gate_up.split(self._stacked_inter, dim=-1)
    return _group(self.act_fn(gate) * up, self.down_proj.base_layer.weight, (self.down_proj,))


def unsupported(layers: nn.ModuleList) -> str | None:
    """Why the layers cannot run stacked (None: they can)."""
    for layer in layers:
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if attn is None or mlp is None:
            return "a layer without self_attn and mlp"
        for owner, names in ((attn, _ATTN), (mlp, _MLP)):
            for name in names:
                m = getattr(owner, name, None)
                if m is None or not hasattr(m, "lora_A") or ADAPTER_NAME not in m.lora_A:
                    return f"{name} has no LoRA adapter"
                if m.base_layer.bias is not None:
                    return f"{name} has a bias"
                if not isinstance(m.lora_dropout[ADAPTER_NAME], nn.Identity):
                    return "LoRA dropout"
                if getattr(m, "use_dora", {}).get(ADAPTER_NAME, False):
                    return "DoRA"
        if type(attn).__name__ not in ("LlamaAttention", "Qwen3Attention"):
            return f"attention {type(attn).__name__}"
    return None


def stack_layers(layers: nn.ModuleList) -> bool:
    """Run every layer's attention and MLP stacked from now on; False (nothing changed)
    where `unsupported` says why not."""
    if unsupported(layers) is not None:
        return False
    for layer in layers:
        attn, mlp = layer.self_attn, layer.mlp
        qkv = [attn.q_proj, attn.k_proj, attn.v_proj]
        attn._stacked_widths = [m.base_layer.out_features for m in qkv]
        attn.register_buffer("_stacked_qkv", _stack_bases(qkv), persistent=False)
        attn.forward = types.MethodType(_attention_forward, attn)
        mlp._stacked_inter = mlp.gate_proj.base_layer.out_features
        gate_up = _stack_bases([mlp.gate_proj, mlp.up_proj])
        mlp.register_buffer("_stacked_gate_up", gate_up, persistent=False)
        mlp.forward = types.MethodType(_mlp_forward, mlp)
    return True


def is_stacked(layer: nn.Module) -> bool:
    fwd = layer.self_attn.__dict__.get("forward")
    return isinstance(fwd, types.MethodType) and fwd.__func__ is _attention_forward
