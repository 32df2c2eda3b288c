"""The torch.distributed group of the trainer ranks: NCCL on GPU, gloo on CPU. Under Ray, rank
0's actor names the meeting point (`TrainerActor.rendezvous`) and every rank joins it in
`build`; without Ray, `torch.distributed.run` sets the environment that `init_from_env`
reads (torchrun_train.py, bench/gpu/standalone.py)."""

from __future__ import annotations

import os
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


def init_from_env(use_cuda: bool | None = None) -> tuple[int, int]:
    """Join the group that `torch.distributed.run` describes (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT); each rank takes the GPU of its local rank. → (rank, world)."""
    if dist.is_initialized():
        raise RuntimeError("this process already belongs to a torch.distributed group")
    use_cuda = torch.cuda.is_available() if use_cuda is None else use_cuda
    device = None
    if use_cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    # device_id binds NCCL to this rank's GPU up front (else it guesses from the rank)
    dist.init_process_group("nccl" if use_cuda else "gloo", timeout=TIMEOUT, device_id=device)
    return dist.get_rank(), dist.get_world_size()
