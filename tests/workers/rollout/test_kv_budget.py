"""KV-cache sizing (workers/rollout/kv_budget.py): the bytes of a cache, what fits, and the
refusal that names it."""

from __future__ import annotations

import pytest
import torch

from workers.rollout import kv_budget
from workers.rollout.kv_budget import CacheShape, KVCacheTooLarge


def test_cache_bytes_and_what_fits():
    # the Llama-3.1-8B shape: 32 layers, 8 KV heads of 128, bf16: 128 KiB a position a row
    shape = CacheShape(layers=32, rows=256, kv_heads=8, length=384, head_dim=128, itemsize=2)
    assert shape.position_bytes == 2 * 32 * 8 * 128 * 2 == 131072
    assert shape.nbytes == 256 * 384 * 131072  # 12 GiB
    length, rows = shape.fit(6 << 30)
    assert (length, rows) == (192, 128)
    assert CacheShape(32, rows, 8, 384, 128, 2).nbytes <= 6 << 30
    assert CacheShape(32, 256, 8, length + 1, 128, 2).nbytes > 6 << 30


def test_check_refuses_what_does_not_fit_and_names_what_would(monkeypatch):
    cpu = torch.device("cpu")
    shape = CacheShape(layers=2, rows=4, kv_heads=2, length=64, head_dim=16, itemsize=4)
    kv_budget.check(cpu, shape)  # off CUDA: unbounded
    monkeypatch.setattr(kv_budget, "available", lambda device, held=0: shape.nbytes // 2 + held)
    with pytest.raises(KVCacheTooLarge, match="4 rows fit 32 positions, 64 positions fit 2 rows"):
        kv_budget.check(cpu, shape)
    kv_budget.check(cpu, shape, held=shape.nbytes // 2)  # the old cache's bytes count


def test_headroom_is_per_device():
    kv_budget.set_headroom("cuda:1", 5 << 30)
    try:
        assert kv_budget.headroom(torch.device("cuda", 1)) == 5 << 30
        assert kv_budget.headroom("cuda:0") == 0
    finally:
        kv_budget.set_headroom("cuda:1", 0)
