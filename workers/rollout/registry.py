"""Engines by name, a run alone's and a pool's in one table. Engines are imported only when
chosen, so a cluster without vLLM can still run the torch backend, and a missing engine
fails with its package name.

What an engine can do is declared on its class, as the protocols say (base.py's
`RolloutBackend`, pool_engine.py's `PoolEngine`): whether it checks the trainer's probe
(`needs_probe`), takes a device (`placeable`), and, pooled, batches rows of several
adapters (`batches_adapters`) in how many slots (`capacity`, `rollout.max_loras` unless the
pool says) of which LoRA rank (`max_lora_rank`)."""

from __future__ import annotations

import importlib
from pathlib import Path

import torch

from ..names import BACKEND_MODULES, names_check
from ..names import BACKENDS as NAMES
from ..spec import RunSpec
from .base import RolloutBackend
from .pool_engine import PoolEngine

# name → {"solo": (module, class), "pool": (module, class)}: the engine of a run alone and
# the one that serves a pool's runs, each a slot of its own
BACKENDS: dict[str, dict[str, tuple[str, str]]] = {
    "torch": {
        "solo": ("workers.rollout.torch_engine", "TorchBackend"),
        "pool": ("workers.rollout.torch_engine", "TorchPool"),
    },
    "vllm": {
        "solo": ("workers.rollout.vllm_backend", "VllmBackend"),
        "pool": ("workers.rollout.vllm_backend", "VllmPool"),
    },
    "trtllm": {
        "solo": ("workers.rollout.trtllm_backend", "TrtllmBackend"),
        "pool": ("workers.rollout.trtllm_backend", "TrtllmPool"),
    },
}
names_check("rollout backends of workers/rollout/registry.py", BACKENDS, NAMES)


def engine_class(name: str, kind: str = "solo") -> type:
    """The class of backend `name`: a run alone's (`solo`) or a pool's (`pool`)."""
    if name not in BACKENDS:
        raise KeyError(f"unknown rollout backend {name!r}; known: {', '.join(BACKENDS)}")
    module_name, cls_name = BACKENDS[name][kind]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            f"rollout.backend {name!r} needs the {BACKEND_MODULES[name][0]!r} package (and "
            f"{module_name}); import failed: {exc}"
        ) from exc
    return getattr(module, cls_name)


def _placed(cls: type, device: torch.device | None) -> dict:
    # an in-process engine takes the device it is given; the others pick theirs
    return {"device": device} if device is not None and cls.placeable else {}


def make_backend(
    spec: RunSpec, model_dir: str | Path, device: torch.device | None = None
) -> RolloutBackend:
    """The engine `rollout.backend` names, for a run alone."""
    cls = engine_class(spec.rollout.backend)
    return cls(spec, model_dir, **_placed(cls, device))


def make_pool_engine(
    spec: RunSpec,
    model_dir: str | Path,
    capacity: int | None = None,
    max_lora_rank: int | None = None,
    device: torch.device | None = None,
) -> PoolEngine:
    """The engine `rollout.backend` names, for a pool: `capacity` adapter slots (default
    `rollout.max_loras`) of LoRA rank up to `max_lora_rank` (the engine's default: the
    founding run's `lora.r`, or any rank where adapters need not share one)."""
    cls = engine_class(spec.rollout.backend, "pool")
    return cls(spec, model_dir, capacity, max_lora_rank, **_placed(cls, device))
