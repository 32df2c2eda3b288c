"""The decode-attention kernel (workers/rollout/decode_attention.py, the static decoder's
attention on a GPU) against its torch reference: the same outputs and the same cache
writes, for rows of every padding and length, retired rows (t = 0) and GQA groups of 1, 2
and 4, on fresh random inputs each case: both kernels (one program a row and KV head, and
the split kernel with its combine).

    python3 -m pytest -c /dev/null --noconftest -p no:cacheprovider -q tests/workers/gpu
"""

from __future__ import annotations

import pytest
import torch

from workers.rollout import decode_attention as decode_attention_module
from workers.rollout.decode_attention import (
    available,
    decode_attention,
    decode_attention_reference,
    works,
)

from .test_fast_paths import rel

pytestmark = pytest.mark.gpu


@pytest.fixture(params=[0, 64, 128, 256], ids=lambda c: f"chunk{c}")
def chunk(request):
    """The kernel's CHUNK: 0, one program a (row, KV head); else the split kernel's
    programs of that many positions and their combine."""
    saved = dict(decode_attention_module.CONFIG)
    decode_attention_module.CONFIG.update(CHUNK=request.param)
    yield request.param
    decode_attention_module.CONFIG.clear()
    decode_attention_module.CONFIG.update(saved)


@pytest.mark.parametrize("heads,n_kv", [(8, 8), (16, 8), (32, 8)])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("extent", [None, 320])  # the cache's length, or the decoder's bound
def test_kernel_matches_reference(heads, n_kv, seed, extent, chunk):
    dev = torch.device("cuda")
    assert available(dev, 128) and works(dev, torch.bfloat16, heads, n_kv, 128)
    g = torch.Generator(device=dev).manual_seed(seed)
    n, length, d, batch = 37, 384, 128, 40
    bf = torch.bfloat16

    def randn(*shape):
        return torch.randn(*shape, generator=g, device=dev).to(bf)

    keys, values = randn(batch, n_kv, length, d), randn(batch, n_kv, length, d)
    # q, k and v as the decoder has them: views of one projection's output
    qkv = randn(n, heads + 2 * n_kv, d)
    q, k, v = qkv[:, :heads], qkv[:, heads : heads + n_kv], qkv[:, heads + n_kv :]
    bound = length if extent is None else extent  # every row's t < extent
    t = torch.randint(0, bound, (n,), generator=g, device=dev)
    pad = (torch.rand(n, generator=g, device=dev) * t).long()  # pad <= t
    t[0], pad[0] = 0, 0  # a retired row: only its own new token
    t[1], pad[1] = bound - 1, 0  # the whole cache (or extent)
    t[2], pad[2] = 200, 190  # ten positions after the padding, across a split boundary or not
    ref_k, ref_v = keys.clone(), values.clone()
    want = decode_attention_reference(q, k, v, ref_k, ref_v, t, pad, 0.088)
    out = torch.full_like(want, float("nan"))
    out.copy_(decode_attention(q, k, v, keys, values, t, pad, 0.088, extent))
    assert not out.isnan().any()
    assert rel(out, want) < 1e-2, rel(out, want)  # bf16 probabilities, as flash kernels
    assert torch.equal(keys, ref_k) and torch.equal(values, ref_v)  # the same cache writes
