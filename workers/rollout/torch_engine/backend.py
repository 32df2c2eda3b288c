"""The torch rollout backend: batched sampling with a KV cache in plain PyTorch + PEFT.

The embedded default and the reference the other engines are compared with. Its model is a
separate copy from the trainer's, so an adapter reaches it only through `load_adapter` —
exactly like a remote engine. Work runs in a thread (torch releases the GIL), so the async
driver's trainer can run beside it.

This class holds the protocol, the pause and abort state and the step lock; the decoding is
loop.py's over a step source (sources.py). pause("keep") freezes in-flight requests between
two decode steps; if an adapter is loaded meanwhile they continue under it, their KV cache
first recomputed under the new adapter (see loop.py), which is what the trainer's rollout
correction and token_mult_prob_error assume.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import nullcontext
from pathlib import Path

import torch

from ...policy import lora as lora_io
from ...spec import RunSpec, TorchRolloutSpec
from ..base import AdapterUpdate, GroupRequest, GroupResult, PauseMode, pause_mode_check
from ..eos import eos_token_ids
from .loop import batches, decode
from .rows import Rows, Stops
from .sampling import draw
from .sources import CachedForward, StaticSource, StepSource, static_decoder


class TorchBackend:
    name = "torch"
    placeable = True  # make_backend may name the device (an in-process run's second GPU)
    needs_probe = False  # loads the trainer's tensors as they are: no handshake to check
    # finished rows leave the decode batch once they are this share of it (see loop.py)
    compact_below = 0.75

    def __init__(self, spec: RunSpec, model_dir: str | Path, device: torch.device | None = None):
        rollout = spec.rollout
        if not isinstance(rollout, TorchRolloutSpec):
            raise ValueError(f"torch backend: the spec's rollout.backend is {rollout.backend!r}")
        use_gpu = spec.resources.rollout_gpus > 0 and torch.cuda.is_available()
        self.device = device or torch.device("cuda" if use_gpu else "cpu")
        self.max_batch_size = rollout.max_batch_size
        self.continuous = rollout.continuous
        self.tokenizer = lora_io.load_tokenizer(model_dir)
        self.eos_id = self.tokenizer.eos_token_id
        # every EOS id the model declares ends a sample (an instruct model has two)
        self.eos_ids = frozenset(eos_token_ids(model_dir, self.eos_id))
        self.pad_id = self.tokenizer.pad_token_id
        self.model = lora_io.load_spec_model(model_dir, spec, self.device)
        self.model.eval()
        self.decoder = static_decoder(self.model, rollout, self.device)
        # rollout.compile on a GPU: sampling's passes over [rows, vocab] fused into two
        self.draw = draw
        if self.decoder is not None and self.decoder.compiled:
            self.draw = torch.compile(draw)
        # the static decoder on a GPU launches the next decode step while the host records
        # this one's tokens (loop.py): 49.6k tokens/s against 44.8k at batch 256 on an H200
        # (docs/performance.md); the PEFT forward keeps the serial loop
        self.overlap = self.device.type == "cuda" and self.decoder is not None
        # The engine's own CUDA stream: in one process with the trainer (the embedded async
        # run on one GPU) its kernels can then run beside the trainer's instead of queueing
        # behind them on the default stream.
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._version = -1  # nothing acknowledged yet: generate() refuses to run
        self._step_lock = threading.Lock()  # one decode step or one adapter load at a time
        self._cond = threading.Condition()  # guards _admitting and _inflight
        self._admitting = True
        self._inflight = 0
        self._running = threading.Event()  # cleared by pause("keep"): decode steps wait
        self._running.set()
        self._abort = threading.Event()
        self._aborted: list[GroupResult] = []
        self.served_log: list[int] = []  # every version acknowledged, in order (for tests)

    @property
    def served_version(self) -> int:
        return self._version

    def use_stream(self, stream: torch.cuda.Stream) -> None:
        """Decode and load adapters on `stream` instead of the engine's own (one that shares
        the GPU with the trainer on a plan: workers/loop/gpu_share.py). Before generating."""
        self._stream = stream

    # ---------------------------------------------------------------- protocol

    async def generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        return await asyncio.to_thread(self._generate, requests)

    async def load_adapter(self, update: AdapterUpdate) -> int:
        return await asyncio.to_thread(self._load_adapter, update)

    async def pause(self, mode: PauseMode) -> None:
        pause_mode_check(mode)
        if mode == "abort":
            self._abort.set()
        elif mode == "keep":
            self._running.clear()
        with self._cond:
            self._admitting = False
            self._cond.notify_all()
        if mode != "keep":  # abort: in-flight requests end at their next step; wait: finish
            await asyncio.to_thread(self._wait_idle)

    async def resume(self) -> None:
        self._abort.clear()
        self._running.set()
        with self._cond:
            self._admitting = True
            self._cond.notify_all()

    async def abort(self) -> list[GroupResult]:
        self._aborted = []
        self._abort.set()
        self._running.set()
        with self._cond:
            self._cond.notify_all()  # frozen requests must wake up to end
        await asyncio.to_thread(self._wait_idle)
        self._abort.clear()
        return list(self._aborted)

    async def close(self) -> None:
        await self.abort()
        self.model = None  # type: ignore[assignment]

    # ---------------------------------------------------------------- internals

    def _wait_idle(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._inflight == 0)

    def _load_adapter(self, update: AdapterUpdate) -> int:
        tensors = lora_io.update_tensors(update)
        with self._step_lock, self._on_stream():  # between two decode steps, never inside one
            if self._stream is not None:  # a trainer's copy of the tensors may be in flight
                self._stream.wait_stream(torch.cuda.default_stream(self.device))
            lora_io.load_adapter_tensors(self.model, tensors)
            if self.decoder is not None:
                self.decoder.refresh()
            self._version = update.version
            self.served_log.append(update.version)
        return self._version

    def _on_stream(self):
        """Run the caller's block on the engine's stream (a no-op on the CPU)."""
        return torch.cuda.stream(self._stream) if self._stream is not None else nullcontext()

    def _generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        if self._version < 0:
            raise RuntimeError(
                "torch backend: no adapter acknowledged yet; call load_adapter first"
            )
        with self._cond:
            # Held while paused; but under an abort, come back at once with the requests as
            # aborted partials (the caller may be stopping and must not block here).
            self._cond.wait_for(lambda: self._admitting or self._abort.is_set())
            self._inflight += 1
        try:
            # on the static decoder, one batch whose freed slots take the next groups
            # (continuous batching); else batches of at most max_batch_size rows
            limit = None if self.decoder is not None and self.continuous else self.max_batch_size
            with self._on_stream():
                results = [r for chunk in batches(requests, limit) for r in self._decode(chunk)]
            aborted = [r for r in results if r.aborted]
            if aborted:
                self._aborted += aborted
            return results
        finally:
            with self._cond:
                self._inflight -= 1
                self._cond.notify_all()

    def _source(self) -> StepSource:
        # built for each batch from the engine's model or decoder as they are now
        if self.decoder is not None:
            return StaticSource(self.decoder, self.pad_id, self.device)
        return CachedForward(self.model, self.pad_id, self.device)

    def _decode(self, requests: list[GroupRequest]) -> list[GroupResult]:
        source = self._source()
        state = Rows(requests, self.device, slots=source.slots)
        if state.rows:
            stops = Stops(self.eos_ids, self._text)
            decode(state, source, self._turns(state), draw=self.draw, stops=stops,
                   compact_below=self.compact_below, overlap=self.overlap)  # fmt: skip
        return state.results(self._text)

    def _text(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def _turns(self, state: Rows):
        """Each decode step's turn: waits while paused ("keep"), ends on an abort or once
        every row has finished, and yields the adapter version to decode under. The body
        of the loop's turn runs under the step lock (an adapter load waits for it to end;
        a static decoder's logits are a CUDA graph's buffer until sampled)."""
        while state.any_active():
            self._running.wait()
            with self._step_lock:
                if self._abort.is_set():
                    return
                yield self._version
