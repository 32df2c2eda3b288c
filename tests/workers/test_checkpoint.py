"""Checkpoints (workers/loop/checkpoint.py): the one layout every executor writes and reads,
checkpoints of the format before it still load, and every file is read as data only."""

from __future__ import annotations

import asyncio
import hashlib
import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from workers.loop.buffer import TrajectoryBuffer
from workers.loop.checkpoint import load_checkpoint, save_checkpoint
from workers.loop.executor import LocalExecutor
from workers.loop.types import RunState
from workers.spec import parse_spec

from .helpers import PooledTrainer

OLD = Path(__file__).parent / "fixtures" / "checkpoint-0ce9546"


def fixture_spec(tiny_dir: Path, seed: int):
    """The spec the old checkpoints were written with (their README.md)."""
    return parse_spec({
        "model": {"path": str(tiny_dir)},
        "lora": {"r": 2, "alpha": 4, "dropout": 0.1, "target_modules": ["q_proj", "v_proj"]},
        "algorithm": {"num_generations": 2},
        "rollout": {"backend": "torch", "max_new_tokens": 3},
        "async": {"enabled": True, "max_staleness": 1},
        "train": {"steps": 3, "prompts_per_step": 2, "lr": 0.01, "eval_every": 0,
                  "micro_batch_size": 8, "threads": 1},
        "data": {"eval_size": 4},
        "checkpoint": {"every": 2},
        "seed": seed,
    })  # fmt: skip


def digest_tensors(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for k in sorted(tensors):
        h.update(k.encode())
        h.update(tensors[k].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def digest_optimizer(state: dict) -> str:
    h = hashlib.sha256()
    for i in sorted(state["state"]):
        for k in sorted(state["state"][i]):
            h.update(f"{i}.{k}".encode())
            h.update(torch.as_tensor(state["state"][i][k]).cpu().numpy().tobytes())
    h.update(json.dumps(state["param_groups"], sort_keys=True, default=str).encode())
    return h.hexdigest()


# Fields a buffer's groups and samples gained after 0ce9546, at the value an old checkpoint's
# samples load with: they are not part of the old format's digest.
NEW_FIELDS_AT_DEFAULT = (
    ", loss_mask=None",  # Sample: an episode's mask (workers/envs)
    ", episodes=()",  # ScoredGroup: its episodes' turns (workers/envs)
)


def old_format_repr(state: dict) -> str:
    """The buffer's repr as 0ce9546 wrote its digest: without the fields added since, which
    must hold their defaults (an old sample is all model tokens)."""
    text = repr(state)
    for added in NEW_FIELDS_AT_DEFAULT:
        text = text.replace(added, "")
    return text


@pytest.mark.parametrize("written_by", ["solo", "pooled"])
@pytest.mark.parametrize("kind", ["solo", "pool3"])
def test_a_checkpoint_of_the_old_format_loads(tiny_dir, make_spec, kind, written_by):
    """What 0ce9546's own loaders read from its checkpoints (expected.json), today's read:
    adapter tensors, optimizer state, random stream, version, step and buffer, into a run
    alone and into an adapter of a pool of three. (Python's `random` state, which the old
    solo loader also set, is no longer part of a checkpoint: nothing draws from it.)"""
    want = json.loads((OLD / "expected.json").read_text())[written_by]
    spec = fixture_spec(tiny_dir, 5 if written_by == "solo" else 7)
    t = PooledTrainer(kind, spec, make_spec)
    buffer = TrajectoryBuffer(8)
    state = asyncio.run(
        load_checkpoint(OLD / written_by, LocalExecutor(t.policy, t.adapter), buffer)
    )
    assert digest_tensors(t.policy.adapter_tensors(t.adapter)) == want["adapter"]
    assert digest_optimizer(t.policy.optimizer_state(t.adapter)) == want["optimizer"]
    assert hashlib.sha256(t.adapter.rng.cpu.numpy().tobytes()).hexdigest() == want["torch_rng"]
    assert (t.adapter.version, state.step) == (want["version"], want["step"])
    assert (
        hashlib.sha256(old_format_repr(buffer.state_dict()).encode()).hexdigest() == want["buffer"]
    )
    assert {str(k): len(v) for k, v in buffer.state_dict()["steps"].items()} == want[
        "buffer_groups"
    ]


def test_every_executor_writes_one_layout(tiny_dir, make_spec, tmp_path):
    """A run alone's checkpoint and a pooled run's are the same files, and each resumes
    in the other's place with the same state."""
    spec = fixture_spec(tiny_dir, 5)
    state = RunState(step=2, adapter_version=0)
    dirs = {}
    for kind in ("solo", "pool3"):
        t = PooledTrainer(kind, spec, make_spec)
        executor = LocalExecutor(t.policy, t.adapter)
        dirs[kind] = asyncio.run(
            save_checkpoint(tmp_path / kind, state, executor, TrajectoryBuffer(4))
        )
    files = {k: sorted(str(p.relative_to(d)) for p in d.rglob("*")) for k, d in dirs.items()}
    assert files["solo"] == files["pool3"] == [
        "adapter", "adapter/adapter_config.json", "adapter/adapter_model.safetensors",
        "adapter/paddock_adapter.json", "buffer.pt", "optimizer.pt", "rng.pt",
        "trainer_state.json",
    ]  # fmt: skip
    for kind, src in (("solo", dirs["pool3"]), ("pool3", dirs["solo"])):
        t = PooledTrainer(kind, spec, make_spec)
        got = asyncio.run(
            load_checkpoint(src, LocalExecutor(t.policy, t.adapter), TrajectoryBuffer(4))
        )
        assert got == state


class _Payload:
    """Unpickled, it would create the file `marker`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("name", ["rng.pt", "buffer.pt", "optimizer.pt"])
def test_a_file_that_would_run_code_is_refused(tiny_dir, make_spec, tmp_path, name):
    spec = fixture_spec(tiny_dir, 5)
    src = tmp_path / "ckpt"
    shutil.copytree(OLD / "solo", src)
    marker = tmp_path / "ran"
    torch.save({"torch": _Payload(marker), "steps": {}, "pending": {}}, src / name)
    t = PooledTrainer("solo", spec, make_spec)
    with pytest.raises(pickle.UnpicklingError):
        asyncio.run(load_checkpoint(src, LocalExecutor(t.policy), TrajectoryBuffer(4)))
    assert not marker.exists()
