"""A tensor dict packed into one flat buffer per dtype.

An adapter on every linear layer is hundreds of small LoRA matrices; moving them one by one
(host to device, device to host, to another GPU, to another process) costs a transfer, a
sync, and for processes a shared-memory file each, which cost far more than their bytes.
Packed, each move is one transfer per dtype, and unpacking makes views, not copies."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PackedTensors:
    buffers: dict[torch.dtype, torch.Tensor]  # one flat buffer per dtype, all on one device
    layout: list[tuple[str, torch.dtype, torch.Size, int]]  # key, dtype, shape, offset

    @staticmethod
    def pack(tensors: dict[str, torch.Tensor]) -> PackedTensors:
        """A copy of `tensors` (on their own device) in one buffer per dtype."""
        by_dtype: dict[torch.dtype, list[str]] = {}
        for k, v in tensors.items():
            by_dtype.setdefault(v.dtype, []).append(k)
        buffers, layout = {}, []
        for dtype, keys in by_dtype.items():
            offset = 0
            for k in keys:
                layout.append((k, dtype, tensors[k].shape, offset))
                offset += tensors[k].numel()
            buffers[dtype] = torch.cat([tensors[k].detach().reshape(-1) for k in keys])
        return PackedTensors(buffers, layout)

    @property
    def device(self) -> torch.device:
        return next(iter(self.buffers.values())).device if self.buffers else torch.device("cpu")

    def to(self, device: torch.device) -> PackedTensors:
        """One transfer per buffer; host↔GPU through pinned memory, and complete on return
        (the source may be freed or overwritten at once)."""
        if self.device == device:
            return self
        moved = {}
        for dtype, flat in self.buffers.items():
            if device.type == "cpu":  # one DMA into pinned memory
                moved[dtype] = torch.empty(flat.shape, dtype=dtype, pin_memory=True).copy_(flat)
            else:  # to a GPU, from the host or from another GPU
                src = flat.pin_memory() if flat.device.type == "cpu" else flat
                moved[dtype] = src.to(device, non_blocking=True)
        if device.type == "cuda":
            torch.cuda.current_stream(device).synchronize()
        return PackedTensors(moved, self.layout)

    def unpack(self, separate: bool = False) -> dict[str, torch.Tensor]:
        """Views into the buffers by key; with `separate`, copies with storages of their
        own (a safetensors writer refuses tensors that share one)."""
        out = {}
        for k, dtype, shape, offset in self.layout:
            view = self.buffers[dtype][offset : offset + shape.numel()].view(shape)
            out[k] = view.clone() if separate else view
        return out
