"""Checkpoints: the one place that knows their layout and how they are read, for every
executor (a run alone, the ranks of a sharded policy, a pool's members). A directory
`step-N/` holds:

    adapter/            the adapter as a PEFT directory (adapter_config.json and
                        adapter_model.safetensors: `peft` and vLLM load it as it is) and
                        paddock_adapter.json, its version
    optimizer.pt        the adapter's optimizer state (under FSDP the full one)
    rng.pt              the adapter's random stream: {"torch": its CPU generator state,
                        "cuda": [its GPU generator state] on a GPU}
    buffer.pt           the trajectory buffer (groups drawn for later steps, partial groups)
    trainer_state.json  the run's counters (RunState: step, adapter_version, ...)

The trainer's half (`save_trainer`, `load_trainer`) runs where the policy is: every rank of
a sharded policy calls it (the adapter and its optimizer state are gathered) and the first
writes. The run's half (`save_checkpoint`, `load_checkpoint`) runs in the loop, around the
executor's. A directory is written under a temporary name and renamed, so a crash never
leaves a half checkpoint that `resume_from` would trust.

Every file is read with `torch.load(weights_only=True)` (`read`): tensors and plain values,
and for the buffer the loop's own dataclasses, allowed by name; no other pickle runs. A
checkpoint of a run alone resumes in a pool and the reverse. Checkpoints written before this
module (tests/workers/fixtures/checkpoint-0ce9546) load too: a pooled run's run_state.json
is not read (trainer_state.json has its step), a run alone's rng.pt has every device's GPU
stream (the trainer's device's is taken) and Python's `random` state (not read: nothing in
a run draws from it).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import torch

from ..adapters import lora as lora_io
from ..envs.episode import EpisodeState, GroupProgress
from ..policy.adapter import Adapter
from ..policy.policy import LoraPolicy
from ..rollout.base import GroupRequest, GroupResult, Sample, SamplingParams
from .buffer import TrajectoryBuffer
from .types import RunState, ScoredGroup, TrainerExecutor

ADAPTER_DIR = "adapter"
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng.pt"
BUFFER_FILE = "buffer.pt"
STATE_FILE = "trainer_state.json"
# what a buffer holds beside plain values: the classes weights_only may build (episodes in
# flight are GroupProgress with their EpisodeStates: workers/envs/episode.py)
BUFFER_CLASSES = (
    ScoredGroup, GroupResult, Sample, GroupRequest, SamplingParams, GroupProgress, EpisodeState,
)  # fmt: skip


def read(path: Path, classes: tuple[type, ...] = ()) -> Any:
    """A checkpoint file: tensors (on the CPU) and plain values, and instances of `classes`."""
    with torch.serialization.safe_globals(list(classes)):
        return torch.load(path, weights_only=True, map_location="cpu")


# ---------------------------------------------------------------- the trainer's half


def save_trainer(out: Path, policy: LoraPolicy, adapter: Adapter) -> None:
    """The adapter, its optimizer state and its random stream into `out`."""
    tensors = policy.adapter_tensors(adapter)  # collectives under FSDP: every rank
    optimizer = policy.optimizer_state(adapter)
    if not policy.parallel.writes_files:
        return
    config = policy.model.peft_config[adapter.name]
    lora_io.write_adapter_dir(out / ADAPTER_DIR, config, tensors, adapter.version)
    torch.save(optimizer, out / OPTIMIZER_FILE)
    rng: dict[str, Any] = {"torch": adapter.rng.cpu}
    if adapter.rng.cuda is not None:
        rng["cuda"] = [adapter.rng.cuda]
    torch.save(rng, out / RNG_FILE)


def load_trainer(src: Path, policy: LoraPolicy, adapter: Adapter) -> None:
    tensors, version = lora_io.read_adapter_dir(src / ADAPTER_DIR)
    policy.load_adapter_tensors(tensors, version, adapter)
    policy.load_optimizer_state(read(src / OPTIMIZER_FILE), adapter)
    rng = read(src / RNG_FILE)
    adapter.rng.cpu = rng["torch"]
    gpu = rng.get("cuda")
    if adapter.rng.cuda is not None and gpu:
        index = adapter.rng.device.index or 0
        adapter.rng.cuda = gpu[index] if index < len(gpu) else gpu[0]


# ---------------------------------------------------------------- the run's


async def save_checkpoint(
    root: Path,
    state: RunState,
    executor: TrainerExecutor,
    buffer: TrajectoryBuffer,
    keep_last: int | None = None,
) -> Path:
    final = root / f"step-{state.step}"
    tmp = root / f".step-{state.step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    await executor.save(tmp)
    torch.save(buffer.state_dict(), tmp / BUFFER_FILE)
    (tmp / STATE_FILE).write_text(json.dumps(dataclasses.asdict(state), indent=2))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    if keep_last:
        done = sorted((p for p in root.glob("step-*") if p.is_dir()), key=lambda p: int(p.name[5:]))
        for old in done[:-keep_last]:
            shutil.rmtree(old)
    return final


async def load_checkpoint(
    src: Path, executor: TrainerExecutor, buffer: TrajectoryBuffer
) -> RunState:
    if not (src / STATE_FILE).is_file():
        raise FileNotFoundError(f"{src} is not a checkpoint (no {STATE_FILE})")
    await executor.load(src)
    buffer.load_state_dict(read(src / BUFFER_FILE, BUFFER_CLASSES))
    state = RunState(**json.loads((src / STATE_FILE).read_text()))
    if executor.adapter_version != state.adapter_version:
        raise ValueError(
            f"{src}: adapter is version {executor.adapter_version}, "
            f"trainer_state says {state.adapter_version}"
        )
    return state


def checkpoint_bytes(path: Path) -> int:
    """The bytes a checkpoint directory holds (its regular files, links not followed): what
    the job reports with it, so the run's checkpoint list can show the size."""
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def latest_checkpoint(root: Path) -> Path | None:
    found = [p for p in root.glob("step-*") if (p / STATE_FILE).is_file()]
    return max(found, key=lambda p: int(p.name[5:])) if found else None
