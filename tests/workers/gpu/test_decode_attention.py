"""The decode-attention kernel (workers/rollout/decode_attention.py, the static decoder's
attention on a GPU) against its torch reference: the same outputs and the same cache
writes, for rows of every padding and length, retired rows (t = 0) and GQA groups of 1, 2
and 4, on fresh random inputs each case.

    python3 -m pytest -c /dev/null --noconftest -p no:cacheprovider -q tests/workers/gpu
"""

from __future__ import annotations

import pytest
import torch

from workers.rollout.decode_attention import (
    available,
    decode_attention,
    decode_attention_reference,
    works,
)

from .test_fast_paths import rel

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("heads,n_kv", [(8, 8), (16, 8), (32, 8)])
@pytest.mark.parametrize("seed", [0, 1])
def test_kernel_matches_reference(heads, n_kv, seed):
    dev = torch.device("cuda")
    assert available(dev, 128) and works(dev, torch.bfloat16, heads, n_kv, 128)
    g = torch.Generator(device=dev).manual_seed(seed)
    n, length, d, batch = 37, 320, 128, 40
    bf = torch.bfloat16

    def randn(*shape):
        return torch.randn(*shape, generator=g, device=dev).to(bf)

    keys, values = randn(batch, n_kv, length, d), randn(batch, n_kv, length, d)
    # q, k and v as the decoder has them: views of one projection's output
    qkv = randn(n, heads + 2 * n_kv, d)
    q, k, v = qkv[:, :heads], qkv[:, heads : heads + n_kv], qkv[:, heads + n_kv :]
    t = torch.randint(0, length, (n,), generator=g, device=dev)
    pad = (torch.rand(n, generator=g, device=dev) * t).long()  # pad <= t
    t[0], pad[0] = 0, 0  # a retired row: only its own new token
    t[1], pad[1] = length - 1, 0  # the whole cache
    ref_k, ref_v = keys.clone(), values.clone()
    want = decode_attention_reference(q, k, v, ref_k, ref_v, t, pad, 0.088)
    out = torch.full_like(want, float("nan"))
    out.copy_(decode_attention(q, k, v, keys, values, t, pad, 0.088))
    assert not out.isnan().any()
    assert rel(out, want) < 1e-2, rel(out, want)  # bf16 probabilities, as flash kernels
    assert torch.equal(keys, ref_k) and torch.equal(values, ref_v)  # the same cache writes
