"""Where torchrun_train.py puts its engines: `engine_devices`, a pure function of the spec,
the trainer's world size and the host's GPU count."""

from __future__ import annotations

import pytest
import torch

from workers.distributed.torchrun_train import engine_devices
from workers.loop.setup import local_devices
from workers.spec import parse_spec


def spec(make_spec, replicas: int = 1, rollout_gpus: float = 1, trainer_gpus: int = 1):
    return parse_spec(
        make_spec(
            f"resources.rollout_replicas={replicas}",
            f"resources.rollout_gpus={rollout_gpus}",
            f"resources.trainer_gpus={trainer_gpus}",
        )
    )


def cuda(*ids: int) -> list[torch.device]:
    return [torch.device("cuda", i) for i in ids]


def test_one_gpu_host_shares_the_trainers_gpu_as_an_in_process_run_does(make_spec):
    s = spec(make_spec)
    assert engine_devices(s, world=1, gpus=1) == cuda(0)
    assert engine_devices(s, world=1, gpus=1)[0] == local_devices(s, gpus=1)[1]


@pytest.mark.parametrize(
    ("world", "gpus", "replicas", "want"),
    [
        (1, 2, 1, [1]),  # a GPU of its own, after the trainer's
        (2, 4, 2, [2, 3]),
        (1, 4, 2, [1, 2]),  # GPUs left idle beyond the replicas
        (1, 2, 2, [1, 1]),  # more replicas than free GPUs: they take turns on those
        (2, 2, 2, [0, 1]),  # none free: each replica beside a trainer rank
        (4, 2, 1, [0]),  # (more ranks than GPUs: the trainer is the one that fails)
    ],
)
def test_free_gpus_first_then_the_trainers(make_spec, world, gpus, replicas, want):
    assert engine_devices(spec(make_spec, replicas), world, gpus) == cuda(*want)


def test_cpu_without_gpus_or_when_the_spec_asks_for_none(make_spec):
    assert engine_devices(spec(make_spec, 2), world=2, gpus=0) == [torch.device("cpu")] * 2
    s = spec(make_spec, 2, rollout_gpus=0)
    assert engine_devices(s, world=1, gpus=4) == [torch.device("cpu")] * 2


def test_a_cpu_trainer_leaves_every_gpu_to_the_engines(make_spec):
    s = spec(make_spec, 2, trainer_gpus=0)
    assert engine_devices(s, world=1, gpus=2) == cuda(0, 1)
