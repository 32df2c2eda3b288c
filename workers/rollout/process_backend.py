"""Any rollout backend in a child process of an in-process run (`resources.engine_process`).

Why: a torch-backend decode step and a LoRA train step are both launch-bound Python loops,
and in one process they take turns on the GIL. On two GPUs (trainer on one, engine on the
other) that cost the async driver all its overlap: each side ran about half as fast while
the other was busy (bench/gpu/multi.py async). In a child process the engine has an
interpreter of its own; the driver talks to it through this proxy, which keeps the backend
protocol, so nothing else changes.

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
import threading
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp

from ..policy.packed import PackedTensors
from ..spec import RunSpec
from .base import AdapterUpdate, GroupRequest, GroupResult, PauseMode

_CLOSE = "close"
_START_TIMEOUT_S = 600  # loading a large model into an engine takes minutes
_LOAD_PACKED = "load_packed"


class EngineProcessError(RuntimeError):
    """The engine process failed a call, or died."""


class ProcessBackend:
    def __init__(self, spec: RunSpec, model_dir: str | Path, device: torch.device | None = None):
        self.name = spec.rollout.backend
        ctx = mp.get_context("spawn")  # never fork a process that may hold CUDA state
        self._conn, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(
            target=_serve,
            args=(child, spec.model_dump(mode="json", by_alias=True), str(model_dir), device),
            name=f"paddock-engine-{self.name}",
            daemon=True,
        )
        self._proc.start()
        child.close()
        ok, payload = self._conn.recv() if self._conn.poll(_START_TIMEOUT_S) else (False, None)
        if not ok:
            self._proc.kill()
            raise EngineProcessError(
                f"rollout engine process ({self.name}) did not start: "
                f"{payload or f'no answer in {_START_TIMEOUT_S} s'}"
            )
        self.needs_probe = bool(payload["needs_probe"])
        self._version = -1
        self._ids = itertools.count()
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future]] = {}
        self._lock = threading.Lock()  # guards _pending and the pipe's send side
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="engine-replies", daemon=True)
        self._reader.start()

    @property
    def served_version(self) -> int:
        return self._version

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    # ---------------------------------------------------------------- protocol

    async def generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        return await self._call("generate", requests)

    async def load_adapter(self, update: AdapterUpdate) -> int:
        # one buffer per dtype crosses: one shared-memory file from the CPU, one CUDA IPC
        # handle from a GPU (the child copies it to its own GPU), instead of one per tensor
        packed = PackedTensors.pack(update.tensors) if update.tensors is not None else None
        bare = dataclasses.replace(update, tensors=None)
        self._version = await self._call(_LOAD_PACKED, bare, packed)
        return self._version  # the child has copied `packed`: it may be freed now

    async def pause(self, mode: PauseMode) -> None:
        await self._call("pause", mode)

    async def resume(self) -> None:
        await self._call("resume")

    async def abort(self) -> list[GroupResult]:
        return await self._call("abort")

    async def close(self) -> None:
        if self._closed:
            return
        try:
            await self._call("close")
        except EngineProcessError:
            pass  # already gone: nothing left to close
        self._closed = True
        await asyncio.to_thread(self._proc.join, 30)
        if self._proc.is_alive():
            self._proc.kill()

    # ---------------------------------------------------------------- plumbing

    async def _call(self, method: str, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        with self._lock:
            if self._closed or not self._proc.is_alive():
                raise EngineProcessError(self._gone())
            call_id = next(self._ids)
            self._pending[call_id] = (loop, fut)
            self._conn.send((call_id, method, args))
        return await fut

    def _read(self) -> None:
        while True:
            try:
                call_id, ok, payload = self._conn.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                loop, fut = self._pending.pop(call_id, (None, None))
            if fut is not None:
                result = payload if ok else EngineProcessError(payload)
                loop.call_soon_threadsafe(_settle, fut, ok, result)
        self._proc.join(5)
        with self._lock:
            pending, self._pending = self._pending, {}
        for loop, fut in pending.values():
            loop.call_soon_threadsafe(_settle, fut, False, EngineProcessError(self._gone()))

    def _gone(self) -> str:
        code = self._proc.exitcode
        return f"rollout engine process ({self.name}) is gone" + (
            f" (exit code {code})" if code is not None else ""
        )


def _settle(fut: asyncio.Future, ok: bool, result: Any) -> None:
    if fut.done():  # the caller was cancelled meanwhile
        return
    if ok:
        fut.set_result(result)
    else:
        fut.set_exception(result)


# -------------------------------------------------------------------- the child


def _serve(conn, spec_data: dict, model_dir: str, device: torch.device | None) -> None:
    from ..spec import parse_spec
    from .registry import make_backend

    try:
        spec = parse_spec(spec_data)
        if spec.train.threads:
            torch.set_num_threads(spec.train.threads)
        backend = make_backend(spec, model_dir, device=device)
    except BaseException as exc:  # the parent shows why the engine did not start
        conn.send((False, f"{type(exc).__name__}: {exc}"))
        return
    conn.send((True, {"needs_probe": getattr(backend, "needs_probe", True)}))
    asyncio.run(_answer(conn, backend))


async def _answer(conn, backend) -> None:
    loop = asyncio.get_running_loop()
    send_lock = threading.Lock()
    tasks: set[asyncio.Task] = set()

    def reply(call_id: int, ok: bool, payload: Any) -> None:
        with send_lock:
            conn.send((call_id, ok, payload))

    async def load_packed(update: AdapterUpdate, packed: PackedTensors | None) -> int:
        if packed is not None:
            update = dataclasses.replace(update, tensors=packed.unpack())
        return await backend.load_adapter(update)

    async def run(call_id: int, method: str, args: tuple) -> None:
        call = load_packed if method == _LOAD_PACKED else getattr(backend, method)
        try:
            reply(call_id, True, await call(*args))
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
            await backend.close()
            reply(call_id, True, None)
            break
        task = asyncio.create_task(run(call_id, method, args))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
