"""Checkpoints: adapter, optimizer, RNG (by the executor), plus the trajectory buffer and the
run's counters. A directory is written under a temporary name and renamed, so a crash never
leaves a half checkpoint that `resume_from` would trust."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import torch

from .buffer import TrajectoryBuffer
from .executor import TrainerExecutor
from .types import RunState

STATE_FILE = "trainer_state.json"


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
    torch.save(buffer.state_dict(), tmp / "buffer.pt")
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
    # Our own file: the buffer holds dataclasses, so it needs the full unpickler.
    buffer.load_state_dict(torch.load(src / "buffer.pt", weights_only=False))
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
