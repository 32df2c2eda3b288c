"""Any engine of the registry in a child process: a run alone's (`resources.engine_process`
of an in-process run) or a pool's (`PoolDriver(engine_process=True)`).

Why: a torch-backend decode step and a LoRA train step are both launch-bound Python loops,
and in one process they take turns on the GIL. On two GPUs (trainer on one, engine on the
other) that cost the async driver all its overlap: each side ran about half as fast while
the other was busy (bench/gpu/multi.py async); a pool on the CPU used one core however many
it had (bench/pool_cpu.py: CPU seconds about equal to the wall-clock, on two cores). In a
child process the engine has an interpreter of its own; the caller talks to it through
`EngineProcess`, which keeps the engine's protocol (base.py's for a run alone,
pool_engine.py's for a pool), so nothing else changes.

The protocol's calls travel over a pipe as (call id, method, args), and several may be in
flight at once (a `pause` must reach the engine while a `generate` runs): the child runs
each call as its own task, a reader thread here resolves each reply's future. Adapter
tensors cross through shared memory (torch.multiprocessing's pickler). The child dies with
its parent (daemon), and a child that dies fails every pending call with its exit code.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import resource
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp

from ..adapters.packed import PackedTensors
from ..adapters.update import AdapterUpdate
from ..spec import LoraSpec, RunSpec, parse_spec
from .base import GroupResult
from .pool_engine import require_admissible
from .registry import make_backend, make_pool_engine

_CLOSE = "close"
_START_TIMEOUT_S = 600  # loading a large model into an engine takes minutes


class EngineProcessError(RuntimeError):
    """The engine process failed a call, or died."""


class EngineChannel:
    """A child process that builds an engine object and answers calls of its async methods.

    `target(conn, *args)` runs in the child (a module-level function, for spawn): it builds
    the engine and hands it to `serve`, which first sends `describe(engine)` back (the
    engine's fixed attributes the parent needs synchronously) and then answers calls until
    `close`. Several calls may be in flight at once."""

    def __init__(self, target: Callable, args: tuple, what: str, start_method: str = "spawn"):
        """`start_method` "spawn" (the default: never fork a process that may hold CUDA
        state) or "fork" (see `fork_is_safe`)."""
        self.what = what  # names the process in errors: "rollout engine process (torch)"
        ctx = mp.get_context(start_method)
        self._conn, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(
            target=target, args=(child, *args), name=f"paddock-{what}", daemon=True
        )
        self._proc.start()
        child.close()
        try:
            ok, payload = self._conn.recv() if self._conn.poll(_START_TIMEOUT_S) else (False, None)
        except (EOFError, OSError):  # it died before it could say why
            self._proc.join(5)
            ok, payload = False, f"it exited with code {self._proc.exitcode}"
        if not ok:
            self._proc.kill()
            raise EngineProcessError(
                f"{what} did not start: {payload or f'no answer in {_START_TIMEOUT_S} s'}"
            )
        self.hello: dict = payload
        self.exit_cpu_s: float | None = None  # the child's CPU seconds, told when it closed
        self._ids = itertools.count()
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future, tuple]] = {}
        self._lock = threading.Lock()  # guards _pending and the pipe's send side
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="engine-replies", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    async def call(self, method: str, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        with self._lock:
            if self._closed or not self._proc.is_alive():
                raise EngineProcessError(self._gone())
            call_id = next(self._ids)
            sent = _packed(args)  # kept until the reply: the child reads its shared memory
            self._pending[call_id] = (loop, fut, sent)
            self._conn.send((call_id, method, sent))
        return await fut

    async def close(self) -> None:
        if self._closed:
            return
        try:
            self.exit_cpu_s = await self.call(_CLOSE)
        except EngineProcessError:
            pass  # already gone: nothing left to close
        self._closed = True
        await asyncio.to_thread(self._proc.join, 30)
        if self._proc.is_alive():
            self._proc.kill()

    def _read(self) -> None:
        while True:
            try:
                call_id, ok, payload = self._conn.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                loop, fut, _ = self._pending.pop(call_id, (None, None, None))
            if fut is not None:
                result = payload if ok else EngineProcessError(payload)
                loop.call_soon_threadsafe(_settle, fut, ok, result)
        self._proc.join(5)
        with self._lock:
            pending, self._pending = self._pending, {}
        for loop, fut, _ in pending.values():
            loop.call_soon_threadsafe(_settle, fut, False, EngineProcessError(self._gone()))

    def _gone(self) -> str:
        code = self._proc.exitcode
        return f"{self.what} is gone" + (f" (exit code {code})" if code is not None else "")


class EngineProcess:
    """An engine of the registry in a child process, behind the engine's own protocol: a
    run alone's (`pool` None: base.py's `RolloutBackend`) or a pool's (`pool` = (capacity,
    max_lora_rank), as `make_pool_engine` takes them: pool_engine.py's `PoolEngine`). Each
    call crosses as it is (a pool's calls name their run first); what a caller reads
    synchronously is kept here: the engine's fixed attributes from its start, and each
    version acknowledged, from the replies to the loads (per run; a run alone's under
    None)."""

    placeable = True  # the device is handed to the engine the child builds

    def __init__(
        self,
        spec: RunSpec,
        model_dir: str | Path,
        device: torch.device | None = None,
        pool: tuple[int | None, int | None] | None = None,
    ):
        self.pooled = pool is not None
        kind = "pool engine" if self.pooled else "rollout engine"
        # a pool's engine is forked where that is safe (its start then takes a fraction of
        # a second); a run alone's is spawned (it may run inside a Ray worker's process)
        start = "fork" if self.pooled and fork_is_safe(device) else "spawn"
        self._channel = EngineChannel(
            _serve,
            (spec.model_dump(mode="json", by_alias=True), str(model_dir), device, pool),
            f"{kind} process ({spec.rollout.backend})",
            start,
        )
        hello = self._channel.hello
        self.name, self.needs_probe = hello["name"], hello["needs_probe"]
        if self.pooled:
            self.batches_adapters = hello["batches_adapters"]
            self.capacity, self.max_lora_rank = hello["capacity"], hello["max_lora_rank"]
        self._versions: dict[str | None, int] = {}  # run → its acknowledged version
        self._joining: set[str | None] = set()  # runs whose first load is on its way

    @property
    def pid(self) -> int | None:
        return self._channel.pid

    @property
    def exit_cpu_s(self) -> float | None:
        """The engine process's CPU seconds, once it has closed."""
        return self._channel.exit_cpu_s

    @property
    def served_version(self) -> int:
        """A run alone's acknowledged version."""
        return self._versions.get(None, -1)

    def served_versions(self) -> dict[str, int]:
        """A pool's runs, each at its acknowledged version."""
        return {run: v for run, v in self._versions.items() if run is not None}

    def check_admission(self, run_id: str, lora: LoraSpec) -> None:
        require_admissible(self, run_id, lora, self._versions.keys() | self._joining)

    # ---------------------------------------------------------------- protocol

    async def load_adapter(self, *args: Any) -> int:
        """(update) for a run alone, (run_id, update, lora) for a pool."""
        run = args[0] if self.pooled else None
        self._joining.add(run)
        try:
            version = await self._channel.call("load_adapter", *args)
        finally:
            self._joining.discard(run)
        self._versions[run] = version
        return version  # the child has copied the update's tensors: they may be freed now

    async def unload_adapter(self, run_id: str) -> None:
        try:
            await self._channel.call("unload_adapter", run_id)
        finally:
            self._versions.pop(run_id, None)

    async def generate(self, requests: list) -> list[GroupResult]:
        return await self._channel.call("generate", requests)

    async def pause(self, *args: Any) -> None:
        """(mode), or (run_id, mode) for a pool."""
        await self._channel.call("pause", *args)

    async def resume(self, *args: Any) -> None:
        await self._channel.call("resume", *args)

    async def abort(self, *args: Any) -> list[GroupResult]:
        return await self._channel.call("abort", *args)

    async def close(self) -> None:
        await self._channel.close()
        self._versions.clear()


def _settle(fut: asyncio.Future, ok: bool, result: Any) -> None:
    if fut.done():  # the caller was cancelled meanwhile
        return
    if ok:
        fut.set_result(result)
    else:
        fut.set_exception(result)


@dataclasses.dataclass
class _PackedUpdate:
    """An adapter update on its way to the child: its tensors in one buffer per dtype (one
    shared-memory file from the CPU, one CUDA IPC handle from a GPU, which the child copies
    to its own GPU), instead of one per tensor."""

    bare: AdapterUpdate
    packed: PackedTensors

    def unpack(self) -> AdapterUpdate:
        return dataclasses.replace(self.bare, tensors=self.packed.unpack())


def _packed(args: tuple) -> tuple:
    return tuple(
        _PackedUpdate(dataclasses.replace(a, tensors=None), PackedTensors.pack(a.tensors))
        if isinstance(a, AdapterUpdate) and a.tensors is not None
        else a
        for a in args
    )


# -------------------------------------------------------------------- the child


def _serve(conn, spec_data: dict, model_dir: str, device: torch.device | None,
           pool: tuple[int | None, int | None] | None) -> None:  # fmt: skip
    def build():
        spec = parse_spec(spec_data)
        if spec.train.threads:
            torch.set_num_threads(spec.train.threads)
        if pool is None:
            return make_backend(spec, model_dir, device=device)
        return make_pool_engine(spec, model_dir, *pool, device=device)

    def describe(engine) -> dict:
        fixed = {"name": engine.name, "needs_probe": engine.needs_probe}
        if pool is not None:
            fixed.update(batches_adapters=engine.batches_adapters, capacity=engine.capacity,
                         max_lora_rank=engine.max_lora_rank)  # fmt: skip
        return fixed

    serve(conn, build, describe)


def serve(conn, build: Callable[[], Any], describe: Callable[[Any], dict]) -> None:
    """The child's side of an EngineChannel: build the engine, say so, answer calls."""
    try:
        engine = build()
        hello = describe(engine)
    except BaseException as exc:  # the parent shows why the engine did not start
        conn.send((False, f"{type(exc).__name__}: {exc}"))
        return
    conn.send((True, hello))
    if asyncio.run(_answer(conn, engine)):
        # closed and said so: nothing is left to tear down that the parent should wait for
        # (a torch interpreter's exit takes seconds), and a forked child must not run the
        # parent's exit handlers
        os._exit(0)


async def _answer(conn, engine) -> bool:
    """Answer calls until `close` (True, once the engine has closed) or the parent is gone."""
    loop = asyncio.get_running_loop()
    send_lock = threading.Lock()
    tasks: set[asyncio.Task] = set()

    def reply(call_id: int, ok: bool, payload: Any) -> None:
        with send_lock:
            conn.send((call_id, ok, payload))

    async def run(call_id: int, method: str, args: tuple) -> None:
        try:
            args = tuple(a.unpack() if isinstance(a, _PackedUpdate) else a for a in args)
            reply(call_id, True, await getattr(engine, method)(*args))
        except BaseException as exc:
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            reply(call_id, False, f"{method}: {detail}")

    while True:
        try:
            call_id, method, args = await loop.run_in_executor(None, conn.recv)
        except (EOFError, OSError):  # the parent is gone
            break
        if method == _CLOSE:
            for task in list(tasks):
                task.cancel()
            await engine.close()
            reply(call_id, True, _cpu_s())
            return True
        task = asyncio.create_task(run(call_id, method, args))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    return False


def _cpu_s() -> float:
    """This process's CPU seconds so far (user and system), for the parent's accounting."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def fork_is_safe(device: torch.device | None) -> bool:
    """Whether the engine process may be forked rather than spawned: an engine on the CPU,
    and no CUDA state in this process (a forked child cannot use CUDA that its parent had
    initialised). Forked, the child has every module of the pool already imported: it starts
    in a fraction of a second, where a spawned one imports torch, transformers and PEFT anew
    (several seconds on a small machine; a pool of short CPU runs finishes in less).

    The pool's process may have other threads when it forks (a pool job's reporters, the
    event loop's executor, tqdm's monitor); the child has only the forking one. It runs the
    engine alone (torch, the tokenizer, its own pipe) and takes none of those threads' locks
    but the interpreter's, which CPython resets in a forked child; a lock of the standard
    streams held by another thread at that instant would stall the child's first write to
    them (not seen in the tests, which fork under reporters and an HTTP server's thread).
    `PoolDriver(engine_process=False)` keeps the engine in the pool's process."""
    # kombu's after-fork handler (a Celery client in this process) closes its inherited
    # Redis connections in the child with a blocking read on the parent's socket: the
    # child hung before its engine started (seen in the full suite's process)
    cpu = device is None or device.type == "cpu"
    return cpu and not torch.cuda.is_initialized() and "kombu" not in sys.modules
