"""How large a KV cache the static decoder may allocate: from the device's free memory and
the memory the trainer beside it on the same GPU still needs for its step.

The static decoder (static_decode.py) keeps `max_batch` rows × the longest request's length
of keys and values for every layer, and keeps them between calls. With the trainer on the
same GPU, a cache that takes the memory of the trainer's next step makes that step run out
of memory, far from its cause. `check` is consulted before every allocation: it refuses a
cache that does not fit, and says how many rows and how many positions would.

Free memory is the driver's (`torch.cuda.mem_get_info`) plus what torch's caching allocator
holds unused (reserved, not allocated: it would hand that to the cache first) plus the old
cache, freed before the new one is allocated; minus the headroom kept for others on the
device (`set_headroom`: the trainer registers the peak its step needs above what it keeps
resident).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_headroom: dict[torch.device, int] = {}


def set_headroom(device: torch.device | str, nbytes: int) -> None:
    """Keep `nbytes` of `device` free for others (the trainer's step) when sizing a cache."""
    _headroom[torch.device(device)] = max(0, int(nbytes))


def headroom(device: torch.device | str) -> int:
    return _headroom.get(torch.device(device), 0)


@dataclass(frozen=True)
class CacheShape:
    """Keys and values of `layers` layers, `rows` slots, `kv_heads` heads, `length` positions."""

    layers: int
    rows: int
    kv_heads: int
    length: int
    head_dim: int
    itemsize: int

    @property
    def position_bytes(self) -> int:
        """Bytes of one row's one position over every layer, keys and values."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.itemsize

    @property
    def nbytes(self) -> int:
        return self.rows * self.length * self.position_bytes

    def fit(self, available: int) -> tuple[int, int]:
        """(positions a row at these rows, rows at this length) that fit in `available`."""
        per = self.position_bytes
        return available // max(1, self.rows * per), available // max(1, self.length * per)


class KVCacheTooLarge(RuntimeError):
    """The cache asked for does not fit beside what the device must keep free."""


def available(device: torch.device, held: int = 0) -> int:
    """Bytes a new cache may take on `device`: free + the allocator's unused reserve + `held`
    (the old cache, freed first) − the headroom. Unbounded off CUDA."""
    if device.type != "cuda":
        return 1 << 62
    free, _ = torch.cuda.mem_get_info(device)
    unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return free + unused + held - headroom(device)


def check(device: torch.device, shape: CacheShape, held: int = 0) -> None:
    """Raise KVCacheTooLarge, naming what would fit, unless `shape` fits on `device`."""
    room = available(device, held)
    if shape.nbytes <= room:
        return
    length, rows = shape.fit(max(0, room))
    gib = 1 << 30
    raise KVCacheTooLarge(
        f"a KV cache of {shape.rows} rows × {shape.length} positions needs "
        f"{shape.nbytes / gib:.1f} GiB, and {max(0, room) / gib:.1f} GiB of {device} are free "
        f"beside the {headroom(device) / gib:.1f} GiB kept for the trainer: {shape.rows} rows "
        f"fit {length} positions, {shape.length} positions fit {rows} rows "
        "(lower rollout.max_batch_size or the prompt and response lengths)"
    )
