"""Holding vLLM's engine between two decode steps, as `Parked` holds the torch engine: a test
lands a pause there while rows are certainly in flight (an event, never a delay).

vLLM decodes in its engine core's own process, which runs ahead of the test's process as it
likes: a test that waits to see tokens and then pauses may find every row ended by the time
the pause reaches the engine. `Hold` is a vLLM logits processor (run inside the engine core
before each step's sampling) that, once armed, stops the engine core at the first step where
every row in the batch holds at least `tokens` tokens, until the test releases it. The test
side (`HeldEngine`) arms it, waits for it to be reached and releases it, through files in a
folder (the two sides are two processes).

vLLM loads a logits processor from the entry points it finds when an engine starts
(`vllm.logits_processors`): `installed(folder)` puts ours on the path for the engines
started inside it only. The folder's name reaches the engine core in the environment."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

ENV = "PADDOCK_TEST_VLLM_HOLD"
INSTALLED = Path(__file__).parent / "installed"  # the entry point's dist-info
WAIT_S = 120  # the longest the engine stays held: a test that dies leaves it running again


class Hold(LogitsProcessor):
    """The engine core's side: inert unless ENV names a folder holding an `arm` file."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        folder = os.environ.get(ENV)
        self.folder = Path(folder) if folder else None
        self.rows: dict[int, list[int]] = {}  # batch index → the row's output tokens (live)
        self.done: set[str] = set()  # arms already held once

    def is_argmax_invariant(self) -> bool:
        return False  # called for every step, greedy ones too (the logits go through as they are)

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.rows.pop(index, None)
        for index, _, _, output in batch_update.added:
            self.rows[index] = output
        for a, b, how in batch_update.moved:
            ra, rb = self.rows.pop(a, None), self.rows.pop(b, None)
            if ra is not None:
                self.rows[b] = ra
            if rb is not None and how is MoveDirectionality.SWAP:
                self.rows[a] = rb

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.folder is None or not self.rows:
            return logits
        arm = self.folder / "arm"
        try:
            name, tokens = arm.read_text().split()
        except (FileNotFoundError, ValueError):
            return logits
        if name in self.done or min(len(out) for out in self.rows.values()) < int(tokens):
            return logits
        self.done.add(name)
        (self.folder / f"reached-{name}").write_text(str(len(self.rows)))
        release, end = self.folder / f"release-{name}", time.monotonic() + WAIT_S
        while not release.exists() and time.monotonic() < end:
            time.sleep(0.001)
        return logits


class HeldEngine:
    """The test's side: `arm(name, tokens)` before the rows go in, `await reached()`, land
    the pause, `release()`."""

    def __init__(self, folder: Path):
        self.folder, self.name = folder, ""

    def arm(self, name: str, tokens: int) -> None:
        self.name = name
        (self.folder / "arm").write_text(f"{name} {tokens}")

    async def reached(self, timeout_s: float = 120) -> None:
        """Until the engine core is held (a bound for a hang, not a delay)."""
        mark = self.folder / f"reached-{self.name}"
        async with asyncio.timeout(timeout_s):
            while not mark.exists():
                await asyncio.sleep(0.005)

    def release(self) -> None:
        (self.folder / f"release-{self.name}").touch()
        (self.folder / "arm").unlink(missing_ok=True)


@contextlib.contextmanager
def installed(folder: Path) -> Iterator[HeldEngine]:
    """`Hold` as an installed vLLM logits processor (INSTALLED's entry point) for the
    engines started inside this block: their engine core takes the environment and the
    path as they are at its start. `folder` must outlive them."""
    old = os.environ.get(ENV)
    os.environ[ENV] = str(folder)
    sys.path.insert(0, str(INSTALLED))
    try:
        yield HeldEngine(folder)
    finally:
        sys.path.remove(str(INSTALLED))
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old
