"""The decode-attention kernels (decode_attention.py) on the CPU, under Triton's interpreter:
the one-program kernel and the split kernel with its combine against the torch reference
(outputs and cache writes), rows of every padding and length, a retired row, a row over the
whole extent, GQA groups of 1 and 2. float16: the interpreter computes bfloat16 wrongly.
The GPU test (tests/workers/gpu/test_decode_attention.py) holds the compiled kernels to the
same reference in bf16.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

CHECK = r"""
import torch
from workers.rollout import decode_attention as da
for chunk, block, heads in ((0, 32, 4), (32, 16, 4), (64, 32, 2)):
    da.CONFIG.update(CHUNK=chunk, BLOCK=block)
    g = torch.Generator().manual_seed(chunk)
    n, n_kv, length, d, extent = 6, 2, 100, 16, 90
    h = torch.float16
    keys = torch.randn(8, n_kv, length, d, generator=g).to(h)
    values = torch.randn(8, n_kv, length, d, generator=g).to(h)
    qkv = torch.randn(n, heads + 2 * n_kv, d, generator=g).to(h)
    q, k, v = qkv[:, :heads], qkv[:, heads : heads + n_kv], qkv[:, heads + n_kv :]
    t = torch.tensor([0, extent - 1, 70, 33, 64, 5])
    pad = torch.tensor([0, 0, 66, 0, 31, 5])  # a retired row, the extent, one split, ...
    ref_k, ref_v = keys.clone(), values.clone()
    want = da.decode_attention_reference(q, k, v, ref_k, ref_v, t, pad, 0.25)
    got = da._launch(q, k, v, keys, values, t, pad, 0.25, extent)
    err = float((got.double() - want.double()).norm() / want.double().norm())
    assert err < 2e-3, (chunk, err)
    assert torch.equal(keys, ref_k) and torch.equal(values, ref_v), chunk
print("ok")
"""


def test_kernels_match_the_reference_under_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")  # read when the kernels are defined
    done = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
