"""The torch engine (PyTorch + PEFT): one model, its adapters in the slots of a step source
(sources.py), and one decode thread running the decode loop (loop.py) over every adapter's
groups. A run alone is this engine with one adapter (backend.py's `TorchBackend`); a pool is
the same engine with a slot per run (`TorchPool`), its runs' rows in one batch where the
source mixes adapters (the static decoder), one adapter's rows a batch where it does not
(the PEFT forward).

The engine's model is a separate copy from the trainer's, so an adapter reaches it only
through `load`, exactly like a remote engine. Decoding runs in its own thread (torch
releases the GIL), started when groups arrive and ended when none is left, so the async
driver's trainer runs beside it; the event loop only queues groups and awaits their results.

What the runs' lanes ask of it (`load`, `hold`, `release`, `cut`) runs between two decode
steps, under the step lock: a caller waiting for the lock gets it at the next turn's end.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from ...adapters import lora as lora_io
from ...adapters.update import AdapterProbe, check_probe, probe_tolerance
from ...spec import LoraSpec, RunSpec, TorchRolloutSpec
from ..base import GroupRequest, GroupResult
from ..eos import eos_token_ids
from .loop import decode
from .rows import Adapter, Group, Rows, Stops
from .sampling import draw
from .sources import StaticSource, make_source


def _resolve(outcomes: list[tuple[asyncio.Future, GroupResult | BaseException]]) -> None:
    """On the caller's event loop: each future takes its group's result (or error)."""
    for future, outcome in outcomes:
        if future.done():  # its caller was cancelled
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


def engine_device(spec: RunSpec) -> torch.device:
    """Where the engine runs unless told: a GPU when the spec gives the rollout one."""
    use_gpu = spec.resources.rollout_gpus > 0 and torch.cuda.is_available()
    return torch.device("cuda" if use_gpu else "cpu")


class TorchEngine:
    """The model, its step source, and the decode thread (see the module docstring)."""

    # finished rows leave the decode batch once they are this share of it (see loop.py)
    compact_below = 0.75

    def __init__(
        self,
        spec: RunSpec,
        model_dir: str | Path,
        device: torch.device | None = None,
        adapters: int = 0,
        max_lora_rank: int = 0,
    ):
        """`adapters` > 0: a pool's slots, of rank up to `max_lora_rank` in the static
        decoder's table; 0: the spec's own adapter."""
        rollout = spec.rollout
        if not isinstance(rollout, TorchRolloutSpec):
            raise ValueError(f"torch backend: the spec's rollout.backend is {rollout.backend!r}")
        self.device = device or engine_device(spec)
        self.tokenizer = lora_io.load_tokenizer(model_dir)
        self.eos_id = self.tokenizer.eos_token_id
        # every EOS id the model declares ends a sample (an instruct model has two)
        self.eos_ids = frozenset(eos_token_ids(model_dir, self.eos_id))
        self.pad_id = self.tokenizer.pad_token_id
        self.model = lora_io.load_spec_model(model_dir, spec, self.device)
        self.model.eval()
        self.source = make_source(
            self.model, rollout, self.device, self.pad_id, adapters, max_lora_rank
        )
        static = isinstance(self.source, StaticSource)
        self.decoder = self.source.decoder if static else None
        self.probe_atol = probe_tolerance(lora_io.base_dtype(spec.model, self.device))
        # rollout.compile on a GPU: sampling's passes over [rows, vocab] fused into two
        self.draw = draw
        if static and self.decoder.compiled:
            self.draw = torch.compile(draw)
        # the static decoder on a GPU launches the next decode step while the host records
        # this one's tokens (loop.py): 49.6k tokens/s against 44.8k at batch 256 on an H200
        # (docs/performance.md); the PEFT forward keeps the serial loop
        self.overlap = self.device.type == "cuda" and static
        # The engine's own CUDA stream: in one process with the trainer (the embedded async
        # run on one GPU) its kernels can then run beside the trainer's instead of queueing
        # behind them on the default stream.
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self.rows = Rows(self.device, self.source.keeps)
        self._lock = threading.Lock()  # the step lock: one decode turn or one control call
        self._state = threading.Condition()  # guards what follows; the decode thread waits on it
        self._inbox: list[Group] = []
        self._callers = 0  # threads waiting for the step lock between two turns
        self._kick = False  # a control call made a held group admissible again
        self._busy = False  # the batch had work at the last turn's end
        self._thread: threading.Thread | None = None
        self._stopped = False
        # called by the decode thread between two turns, outside the step lock (a test
        # holds the decode there to land a control call while rows are in flight)
        self.on_turn: Callable[[], None] | None = None

    def use_stream(self, stream: torch.cuda.Stream) -> None:
        """Decode and load adapters on `stream` instead of the engine's own (one that shares
        the GPU with the trainer on a plan: workers/gpu_share.py). Before generating."""
        self._stream = stream

    def warm_compiled(self, temperature: float) -> bool:
        """Compile the static decoder's step halves and the sampler now (`rollout.compile`
        on a GPU), in the caller's thread and on its stream: an async run warms trainer and
        engine one after the other before they run in two threads (torch.compile is not
        thread-safe: workers/loop/gpu_share.py). True where anything was compiled."""
        decoder = self.decoder
        if decoder is None or not decoder.compiled or decoder.device.type != "cuda":
            return False
        with self._lock:
            warm_decoder(decoder, self.draw, temperature)
        return True

    def text(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    # ---------------------------------------------------------------- requests

    def check(self, requests: list[GroupRequest]) -> None:
        """Raise ValueError for a request whose rows could never be admitted together."""
        for req in requests:
            self.source.check(
                req.n if req.partial is None else sum(not s.done for s in req.partial)
            )

    def submit(
        self, adapter: Adapter, requests: list[GroupRequest], futures: list[asyncio.Future]
    ) -> None:
        """Queue the requests (as one arrival: they may share a prefill) under `adapter`;
        each future (of the running event loop) takes its request's result, or the error
        that ended it."""
        loop = asyncio.get_running_loop()
        groups, done = [], []
        for req, future in zip(requests, futures, strict=True):
            g = Group(req, adapter, self.device, (loop, future))
            # a continued group whose rows are all done has nothing left to make
            (groups if g.todo else done).append(g)
        self._hand_back(done)
        with self._state:
            if self._stopped:
                raise RuntimeError("torch engine: closed")
            self._inbox += groups
            if self._thread is None and groups:
                self._thread = threading.Thread(target=self._run, name="torch-decode", daemon=True)
                self._thread.start()
            self._state.notify_all()

    # ---------------------------------------------------------------- control

    @contextmanager
    def between_turns(self):
        """Hold the step lock between two decode steps (the decode thread lets a waiting
        caller in at its next turn's end), on the engine's stream."""
        with self._state:
            self._callers += 1
        try:
            with self._lock, self._on_stream():
                yield
        finally:
            with self._state:
                self._callers -= 1
                self._kick = True  # whatever the call did may have made work
                self._state.notify_all()

    def load(
        self,
        adapter: Adapter,
        tensors: dict,
        lora: LoraSpec,
        version: int,
        probe: AdapterProbe | None = None,
        who: str = "torch engine",
    ) -> float | None:
        """Copy an adapter version into `adapter`'s slot. Its rows in flight first leave the
        batch with their tokens (they continue, prefilled anew, under this version). With a
        `probe`, the version is acknowledged only if the engine reproduces it (returns its
        max |Δ logprob|); if not, the adapter's groups end now, none of their tokens labelled
        with a version it does not serve."""
        with self.between_turns():
            if self._stream is not None:  # a trainer's copy of the tensors may be in flight
                self._stream.wait_stream(torch.cuda.default_stream(self.device))
            self.rows.cut(adapter, keep=True)
            self.source.load(adapter.slot, tensors, lora)
            err = None
            if probe is not None:
                got = self._probe_logprobs(probe, adapter.slot)
                try:
                    err = check_probe(who, version, probe, got, self.probe_atol)
                except RuntimeError:
                    self._hand_back(self.rows.cut(adapter, keep=False))
                    raise
            adapter.version = version
        return err

    def _probe_logprobs(self, probe: AdapterProbe, slot: int | None) -> list[float]:
        logits = self.source.score(probe.prompt_ids + probe.token_ids, slot).float()
        start = len(probe.prompt_ids) - 1
        lp = torch.log_softmax(logits[start : start + len(probe.token_ids)], dim=-1)
        index = torch.tensor(probe.token_ids, device=lp.device)[:, None]
        return lp.gather(1, index)[:, 0].tolist()

    def hold(self, adapter: Adapter) -> None:
        """`adapter`'s rows leave the batch with their tokens, and its groups wait until
        `release` (its run paused with keep; the other adapters' rows decode on)."""
        with self.between_turns():
            adapter.held = True
            self.rows.cut(adapter, keep=True)

    def release(self, adapter: Adapter) -> None:
        with self.between_turns():
            adapter.held = False

    def cut(self, adapter: Adapter) -> None:
        """End `adapter`'s groups now, held ones too: their unfinished samples come back
        marked "abort" with the tokens they hold."""
        with self.between_turns():
            adapter.held = False
            self._hand_back(self.rows.cut(adapter, keep=False))

    def join(self, slot: int, lora: LoraSpec) -> Adapter:
        with self.between_turns():
            self.source.join(slot, lora)
        return Adapter(slot)

    def leave(self, adapter: Adapter) -> None:
        """The adapter's run leaves the engine (its groups already ended): its slot empty."""
        if adapter.slot is not None:
            with self.between_turns():
                self.source.leave(adapter.slot)
        adapter.version = -1

    def shutdown(self) -> None:
        """Stop the decode thread (every group ended first) and let go of the model."""
        with self._state:
            self._stopped = True
            self._state.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        self.model = self.source = self.decoder = None  # type: ignore[assignment]

    def _hand_back(self, groups: list[Group], error: BaseException | None = None) -> None:
        """Each group's result (or `error`) to its caller's loop: one call a loop."""
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        for g in groups:
            loop, future = g.to
            by_loop.setdefault(loop, []).append((future, error or g.result(self.text)))
        for loop, outcomes in by_loop.items():
            loop.call_soon_threadsafe(_resolve, outcomes)

    def _on_stream(self):
        """Run the caller's block on the engine's stream (a no-op on the CPU)."""
        return torch.cuda.stream(self._stream) if self._stream is not None else nullcontext()

    # ---------------------------------------------------------------- the decode thread

    def _run(self) -> None:
        try:
            with self._on_stream():
                stops = Stops(self.eos_ids, self.text)
                decode(self.rows, self.source, self._turns(), draw=self.draw, stops=stops,
                       compact_below=self.compact_below, overlap=self.overlap)  # fmt: skip
        except BaseException as exc:  # every waiting request learns of it; the next starts anew
            with self._lock, self._state:
                done, failed = self.rows.done, self.rows.groups() + self._inbox
                self.rows, self._inbox = Rows(self.device, self.source.keeps), []
                self._thread, self._busy = None, False
            self._hand_back(done)
            self._hand_back(failed, exc)

    def _turns(self) -> Iterator[None]:
        """Each decode turn: waits while every group left is held (or a control call wants
        the step lock), takes the new arrivals, and ends once no group is left."""
        while True:
            if self.on_turn is not None:
                self.on_turn()
            with self._state:
                self._state.wait_for(
                    lambda: (
                        not self._callers
                        and (self._stopped or self._inbox or self._kick or self._busy)
                    )
                )
                self._kick = False
            with self._lock:
                with self._state:
                    self.rows.pending += self._inbox
                    self._inbox = []
                    if self.rows.empty() or self._stopped:
                        self._thread = None  # a submit from now on starts another
                        return
                if not self.rows.busy():  # only held groups: wait for a release or a cut
                    self._busy = False
                    continue
                yield
                self._hand_back(self.rows.done)
                self.rows.done = []
                self._busy = self.rows.busy()


@torch.no_grad()
def warm_decoder(decoder, draw, temperature: float) -> None:
    """Decode steps at two batch buckets (the decoder's compiled halves are captured in its
    CUDA graphs: static at the first, dynamic from the second) and the compiled sampler,
    with noise and greedy; then the decoder is left empty."""
    dev = decoder.device
    fixed = torch.Generator(dev).manual_seed(0)  # the run's own random streams untouched
    for rows in sorted({min(8, decoder.max_batch), min(9, decoder.max_batch)}):
        ids = torch.arange(3, 7, device=dev).repeat(rows, 1)  # [rows, 4]
        decoder.prefill(ids, torch.ones_like(ids))
        logits = decoder.step(ids[:, -1])
    # the sampler takes any row count (a prefill's new rows, the live ones): 1 is its own
    # graph, then two more sizes make the rows dynamic
    for rows in (1, 2, 3):
        noise = torch.rand(rows, logits.shape[1], device=dev, generator=fixed)
        draw(logits[:rows], temperature, noise, torch.arange(rows, device=dev))
        draw(logits[:rows], temperature)
    decoder.reset()
