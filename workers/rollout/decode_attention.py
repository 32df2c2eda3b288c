"""One decode step's attention over the static KV cache, as one Triton kernel a layer.

For a decode step (one query a row) cuDNN's SDPA with the padding mask ran at about a third
of the H200's memory bandwidth (66 µs a layer at 256 rows × 192 positions, where reading the
keys and values once takes about 22), and the mask conversion and the two cache writes
before it are three more kernels a layer. Here one program a (row, KV head):

- reads the row's cache index t and its padding from device memory, so it scans only the
  positions [pad, t) the row has written (not the graph's attention extent) and a CUDA
  graph replays it unchanged as rows advance;
- attends its GROUP query heads (GQA) to those keys by an online softmax (flash decoding:
  fp32 scores and sums, probabilities cast to the cache dtype for the product with V, as
  the flash kernels do), and to the new key and value from registers;
- writes the new key and value into the cache at t, which nothing else reads in this step.

With CONFIG["CHUNK"] > 0 a row's positions are split instead over programs of CHUNK
positions each (flash decoding's split: more, shorter programs), which write their
unnormalised partials (running max, sum, weighted values) in float32; one combine program a
(row, KV head) merges them with the new token's own term and writes the cache.

`decode_attention_reference` is the same function in torch (the CPU's path, and what the
GPU test holds the kernel to).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

try:  # Triton comes with torch's CUDA builds; the CPU runs the reference
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - CPU-only torch without triton
    triton = None


# the kernel's launch settings: positions a block, warps, pipeline stages, and CHUNK: the
# positions one program of the split kernel covers (0: one program a (row, KV head) over
# all of its positions). bench/gpu/rollout.py compares others side by side: at batch 256
# on an H200 the split kernel gave 0.94-0.98x the one-program kernel's tokens/s (its
# combine alone took 0.2 ms of a 5.1 ms step; docs/performance.md). It is for batches of
# few rows, where one program a (row, KV head) leaves SMs idle (not measured yet).
CONFIG = {"BLOCK": 64, "num_warps": 4, "num_stages": 2, "CHUNK": 0}


def available(device: torch.device, head_dim: int) -> bool:
    """Whether the kernel runs here: a CUDA device, Triton, a power-of-two head size."""
    return (
        triton is not None
        and device.type == "cuda"
        and head_dim >= 16
        and head_dim & (head_dim - 1) == 0
    )


def works(device: torch.device, dtype: torch.dtype, heads: int, n_kv: int, head_dim: int) -> bool:
    """Whether the kernel runs here and computes its reference's function: `available`,
    then one small launch checked against the reference (a machine whose Triton cannot
    compile falls back to SDPA instead of failing at its first rollout)."""
    if not available(device, head_dim):
        return False
    try:
        g = torch.Generator(device=device).manual_seed(0)
        cache = torch.randn(2, 3, n_kv, 80, head_dim, generator=g, device=device).to(dtype)
        qkv = torch.randn(3, heads + 2 * n_kv, head_dim, generator=g, device=device).to(dtype)
        q, k, v = qkv[:, :heads], qkv[:, heads : heads + n_kv], qkv[:, heads + n_kv :]
        t = torch.tensor([0, 40, 79], device=device)
        pad = torch.tensor([0, 3, 70], device=device)
        ref = cache.clone()
        want = decode_attention_reference(q, k, v, ref[0], ref[1], t, pad, 0.1)
        got = decode_attention(q, k, v, cache[0], cache[1], t, pad, 0.1)
        close = torch.allclose(got.float(), want.float(), atol=2e-2, rtol=2e-2)
        return bool(close and torch.equal(cache, ref))
    except Exception:  # noqa: BLE001 - any failure to build or run: not usable here
        return False


def decode_attention_reference(
    q: Tensor, k_new: Tensor, v_new: Tensor, keys: Tensor, values: Tensor, t: Tensor,
    pad: Tensor, scale: float,
) -> Tensor:  # fmt: skip
    """q [n, H, D], k_new and v_new [n, KV, D], keys and values the layer's cache [B, KV, L,
    D] (row r of the batch is cache row r), t and pad [n]: each row's write index and its
    first valid position. Writes k_new, v_new at t and returns [n, H, D]: softmax over the
    positions [pad, t] of q·k × scale, times v."""
    n, heads, d = q.shape
    rows = torch.arange(n, device=q.device)
    keys[rows, :, t] = k_new
    values[rows, :, t] = v_new
    span = torch.arange(keys.shape[2], device=q.device)
    seen = (span >= pad[:, None]) & (span <= t[:, None])  # [n, L]
    group = heads // k_new.shape[1]
    k = keys[:n].repeat_interleave(group, 1).float()  # [n, H, L, D]
    v = values[:n].repeat_interleave(group, 1).float()
    scores = torch.einsum("nhd,nhld->nhl", q.float(), k) * scale
    scores = scores.masked_fill(~seen[:, None], float("-inf"))
    return torch.einsum("nhl,nhld->nhd", torch.softmax(scores, -1), v).to(q.dtype)


if triton is not None:

    @triton.jit
    def _kernel(
        Q, KN, VN, K, V, OUT, T, PAD, scale,
        sq_n, sq_h, skn_n, skn_h, svn_n, svn_h, sk_b, sk_h, sk_l, sv_b, sv_h, sv_l,
        so_n, so_h,
        GROUP: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        r = tl.program_id(0)
        h = tl.program_id(1)
        t = tl.load(T + r)
        pad = tl.load(PAD + r)
        d = tl.arange(0, D)
        g = tl.arange(0, GP)
        live = g < GROUP
        qp = Q + r * sq_n + (h * GROUP + g)[:, None] * sq_h + d[None, :]
        q = tl.load(qp, mask=live[:, None], other=0.0)  # [GP, D], cache dtype
        kn = tl.load(KN + r * skn_n + h * skn_h + d)
        vn = tl.load(VN + r * svn_n + h * svn_h + d)
        # the new token's own key and value, from registers
        m = tl.sum(q.to(tl.float32) * kn.to(tl.float32)[None, :], 1) * scale  # [GP]
        den = tl.full([GP], 1.0, tl.float32)
        acc = tl.zeros([GP, D], tl.float32) + vn.to(tl.float32)[None, :]
        kb = K + r * sk_b + h * sk_h
        vb = V + r * sv_b + h * sv_h
        for j0 in range((pad // BLOCK) * BLOCK, t, BLOCK):
            j = j0 + tl.arange(0, BLOCK)
            valid = (j >= pad) & (j < t)
            k = tl.load(kb + j[:, None] * sk_l + d[None, :], mask=valid[:, None], other=0.0)
            s = tl.dot(q, tl.trans(k)) * scale  # [GP, BLOCK] fp32
            s = tl.where(valid[None, :], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            alpha = tl.exp(m - m_new)
            p = tl.exp(s - m_new[:, None])
            den = den * alpha + tl.sum(p, 1)
            v = tl.load(vb + j[:, None] * sv_l + d[None, :], mask=valid[:, None], other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        out = acc / den[:, None]
        op = OUT + r * so_n + (h * GROUP + g)[:, None] * so_h + d[None, :]
        tl.store(op, out.to(OUT.dtype.element_ty), mask=live[:, None])
        tl.store(kb + t * sk_l + d, kn)
        tl.store(vb + t * sv_l + d, vn)

    @triton.jit
    def _split_kernel(
        Q, K, V, MS, LS, ACC, T, PAD, scale,
        sq_n, sq_h, sk_b, sk_h, sk_l, sv_b, sv_h, sv_l, sm_n, sm_h, sa_n, sa_h,
        GROUP: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr,
        CHUNK: tl.constexpr,
    ):  # fmt: skip
        # program (r, h, s): row r's KV head h over the cache positions [s·CHUNK, (s+1)·CHUNK)
        # ∩ [pad, t); writes its unnormalised partial (running max, sum, weighted values)
        r = tl.program_id(0)
        h = tl.program_id(1)
        s = tl.program_id(2)
        t = tl.load(T + r)
        pad = tl.load(PAD + r)
        lo = tl.maximum(s * CHUNK, (pad // BLOCK) * BLOCK)
        hi = tl.minimum((s + 1) * CHUNK, t)
        if lo < hi:  # else the combine reads nothing of this split
            d = tl.arange(0, D)
            g = tl.arange(0, GP)
            live = g < GROUP
            qp = Q + r * sq_n + (h * GROUP + g)[:, None] * sq_h + d[None, :]
            q = tl.load(qp, mask=live[:, None], other=0.0)  # [GP, D], cache dtype
            m = tl.full([GP], float("-inf"), tl.float32)
            den = tl.zeros([GP], tl.float32)
            acc = tl.zeros([GP, D], tl.float32)
            kb = K + r * sk_b + h * sk_h
            vb = V + r * sv_b + h * sv_h
            for j0 in range(lo, hi, BLOCK):  # every block holds a valid position
                j = j0 + tl.arange(0, BLOCK)
                valid = (j >= pad) & (j < hi)
                k = tl.load(kb + j[:, None] * sk_l + d[None, :], mask=valid[:, None], other=0.0)
                sc = tl.dot(q, tl.trans(k)) * scale  # [GP, BLOCK] fp32
                sc = tl.where(valid[None, :], sc, float("-inf"))
                m_new = tl.maximum(m, tl.max(sc, 1))
                alpha = tl.exp(m - m_new)
                p = tl.exp(sc - m_new[:, None])
                den = den * alpha + tl.sum(p, 1)
                v = tl.load(vb + j[:, None] * sv_l + d[None, :], mask=valid[:, None], other=0.0)
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
                m = m_new
            head = h * GROUP + g
            tl.store(MS + r * sm_n + head * sm_h + s, m, mask=live)
            tl.store(LS + r * sm_n + head * sm_h + s, den, mask=live)
            ap = ACC + r * sa_n + head[:, None] * sa_h + s * D + d[None, :]
            tl.store(ap, acc, mask=live[:, None])

    @triton.jit
    def _combine_kernel(
        Q, KN, VN, K, V, OUT, MS, LS, ACC, T, PAD, scale,
        sq_n, sq_h, skn_n, skn_h, svn_n, svn_h, sk_b, sk_h, sk_l, sv_b, sv_h, sv_l,
        so_n, so_h, sm_n, sm_h, sa_n, sa_h,
        GROUP: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, CHUNK: tl.constexpr,
    ):  # fmt: skip
        # program (r, h): the new token's own term, merged with the splits that hold a
        # position of [pad, t); then the new key and value go into the cache at t
        r = tl.program_id(0)
        h = tl.program_id(1)
        t = tl.load(T + r)
        pad = tl.load(PAD + r)
        d = tl.arange(0, D)
        g = tl.arange(0, GP)
        live = g < GROUP
        head = h * GROUP + g
        q = tl.load(Q + r * sq_n + head[:, None] * sq_h + d[None, :], mask=live[:, None], other=0.0)
        kn = tl.load(KN + r * skn_n + h * skn_h + d)
        vn = tl.load(VN + r * svn_n + h * svn_h + d)
        m = tl.sum(q.to(tl.float32) * kn.to(tl.float32)[None, :], 1) * scale  # [GP]
        den = tl.full([GP], 1.0, tl.float32)
        acc = tl.zeros([GP, D], tl.float32) + vn.to(tl.float32)[None, :]
        s_lo = pad // CHUNK
        s_hi = tl.where(pad < t, (t + CHUNK - 1) // CHUNK, s_lo)
        for s in range(s_lo, s_hi):
            ms = tl.load(MS + r * sm_n + head * sm_h + s, mask=live, other=0.0)
            ls = tl.load(LS + r * sm_n + head * sm_h + s, mask=live, other=0.0)
            ap = ACC + r * sa_n + head[:, None] * sa_h + s * D + d[None, :]
            part = tl.load(ap, mask=live[:, None], other=0.0)
            m_new = tl.maximum(m, ms)
            alpha = tl.exp(m - m_new)
            beta = tl.exp(ms - m_new)
            den = den * alpha + ls * beta
            acc = acc * alpha[:, None] + part * beta[:, None]
            m = m_new
        out = acc / den[:, None]
        op = OUT + r * so_n + head[:, None] * so_h + d[None, :]
        tl.store(op, out.to(OUT.dtype.element_ty), mask=live[:, None])
        tl.store(K + r * sk_b + h * sk_h + t * sk_l + d, kn)
        tl.store(V + r * sv_b + h * sv_h + t * sv_l + d, vn)


def decode_attention(
    q: Tensor, k_new: Tensor, v_new: Tensor, keys: Tensor, values: Tensor, t: Tensor,
    pad: Tensor, scale: float, extent: int | None = None,
) -> Tensor:  # fmt: skip
    """decode_attention_reference's function; the Triton kernel where `available`.
    `extent`: a bound on every row's t + 1 (the positions the split kernel plans for;
    default the cache's length)."""
    if not available(q.device, q.shape[-1]):
        return decode_attention_reference(q, k_new, v_new, keys, values, t, pad, scale)
    return _launch(q, k_new, v_new, keys, values, t, pad, scale, extent)


def _launch(q, k_new, v_new, keys, values, t, pad, scale, extent=None) -> Tensor:
    """The kernels under CONFIG (TRITON_INTERPRET=1 runs them on CPU tensors: the CPU test)."""
    n, heads, d = q.shape
    n_kv = k_new.shape[1]
    for x in (q, k_new, v_new, keys, values):
        if x.stride(-1) != 1:
            raise ValueError("decode attention wants the head dimension contiguous")
    group = heads // n_kv
    gp = max(16, 1 << math.ceil(math.log2(group)))
    out = torch.empty((n, heads, d), dtype=q.dtype, device=q.device)
    chunk, block = CONFIG.get("CHUNK", 0), CONFIG["BLOCK"]
    launch = {"num_warps": CONFIG["num_warps"], "num_stages": CONFIG["num_stages"]}
    if not chunk:  # one program a (row, KV head)
        _kernel[(n, n_kv)](
            q, k_new, v_new, keys, values, out, t, pad, scale,
            q.stride(0), q.stride(1), k_new.stride(0), k_new.stride(1), v_new.stride(0),
            v_new.stride(1), keys.stride(0), keys.stride(1), keys.stride(2), values.stride(0),
            values.stride(1), values.stride(2), out.stride(0), out.stride(1),
            GROUP=group, GP=gp, D=d, BLOCK=block, **launch,
        )  # fmt: skip
        return out
    block = min(block, chunk)
    if chunk % block:
        raise ValueError(f"CHUNK {chunk} must be a multiple of BLOCK {block}")
    length = keys.shape[2] if extent is None else min(extent, keys.shape[2])
    splits = max(1, -(-length // chunk))
    # each split's running max and sum [n, heads, splits] and its weighted values
    # [n, heads, splits, D], in float32 (a captured graph keeps them in its pool)
    ms = torch.empty((n, heads, splits), dtype=torch.float32, device=q.device)
    ls = torch.empty_like(ms)
    acc = torch.empty((n, heads, splits, d), dtype=torch.float32, device=q.device)
    _split_kernel[(n, n_kv, splits)](
        q, keys, values, ms, ls, acc, t, pad, scale,
        q.stride(0), q.stride(1), keys.stride(0), keys.stride(1), keys.stride(2),
        values.stride(0), values.stride(1), values.stride(2), ms.stride(0), ms.stride(1),
        acc.stride(0), acc.stride(1),
        GROUP=group, GP=gp, D=d, BLOCK=block, CHUNK=chunk, **launch,
    )  # fmt: skip
    _combine_kernel[(n, n_kv)](
        q, k_new, v_new, keys, values, out, ms, ls, acc, t, pad, scale,
        q.stride(0), q.stride(1), k_new.stride(0), k_new.stride(1), v_new.stride(0),
        v_new.stride(1), keys.stride(0), keys.stride(1), keys.stride(2), values.stride(0),
        values.stride(1), values.stride(2), out.stride(0), out.stride(1), ms.stride(0),
        ms.stride(1), acc.stride(0), acc.stride(1),
        GROUP=group, GP=gp, D=d, CHUNK=chunk, num_warps=4,
    )  # fmt: skip
    return out
