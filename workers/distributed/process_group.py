"""The torch.distributed group of the trainer actors: NCCL on GPU, gloo on CPU. Rank 0's actor
names the meeting point (`TrainerActor.rendezvous`); every rank joins it in `build`."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = timedelta(minutes=10)


def init_process_group(master: str | None, rank: int, world: int) -> None:
    if master is None:
        raise ValueError("several trainer ranks need rank 0's address:port")
    if dist.is_initialized():
        raise RuntimeError("this process already belongs to a torch.distributed group")
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(0)  # Ray shows each actor only its own GPU(s)
    dist.init_process_group(
        "nccl" if use_cuda else "gloo",
        init_method=f"tcp://{master}",
        rank=rank,
        world_size=world,
        timeout=TIMEOUT,
    )
