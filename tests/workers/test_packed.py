"""PackedTensors: an adapter moves as one buffer per dtype and comes back bit for bit."""

from __future__ import annotations

import torch

from workers.adapters.lora import move_tensors
from workers.adapters.packed import PackedTensors


def tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "a.lora_A": torch.randn(4, 6, generator=g),
        "a.lora_B": torch.randn(6, 4, generator=g),
        "b.lora_A": torch.randn(3, generator=g).to(torch.bfloat16),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
    }


def test_pack_is_one_buffer_per_dtype_and_unpacks_bit_for_bit():
    src = tensors()
    packed = PackedTensors.pack(src)
    assert {d: b.numel() for d, b in packed.buffers.items()} == {
        torch.float32: 48, torch.bfloat16: 3, torch.float64: 1}  # fmt: skip
    out = packed.unpack()
    assert list(out) == list(src)
    for k in src:
        assert out[k].dtype == src[k].dtype and out[k].shape == src[k].shape
        assert torch.equal(out[k], src[k]), k
    # a copy: the source can change without touching what was packed
    src["a.lora_A"].add_(1.0)
    assert not torch.equal(out["a.lora_A"], src["a.lora_A"])


def test_unpacked_views_share_a_buffer_unless_asked_apart():
    packed = PackedTensors.pack(tensors())
    views = packed.unpack()
    assert views["a.lora_A"].untyped_storage().data_ptr() == (
        views["a.lora_B"].untyped_storage().data_ptr()
    )
    apart = move_tensors(tensors(), torch.device("cpu"))  # what checkpoint writers get
    assert apart["a.lora_A"].untyped_storage().data_ptr() != (
        apart["a.lora_B"].untyped_storage().data_ptr()
    )
    for k, v in tensors().items():
        assert torch.equal(apart[k], v)
