"""Backends by name. Engines are imported only when chosen, so a cluster without vLLM can
still run the torch backend, and a missing engine fails with its package name."""

from __future__ import annotations

import importlib
from pathlib import Path

import torch

from ..names import BACKEND_MODULES, names_check
from ..names import BACKENDS as NAMES
from ..spec import RunSpec
from .base import RolloutBackend

# name → (module, class)
BACKENDS: dict[str, tuple[str, str]] = {
    "torch": ("workers.rollout.torch_engine", "TorchBackend"),
    "vllm": ("workers.rollout.vllm_backend", "VllmBackend"),
    "trtllm": ("workers.rollout.trtllm_backend", "TrtllmBackend"),
}
names_check("rollout backends of workers/rollout/registry.py", BACKENDS, NAMES)


def make_backend(
    spec: RunSpec, model_dir: str | Path, device: torch.device | None = None
) -> RolloutBackend:
    """The engine `rollout.backend` names. `device` places an in-process engine that takes a
    device (`placeable`); the others pick theirs by their own settings."""
    name = spec.rollout.backend
    if name not in BACKENDS:
        raise KeyError(f"unknown rollout backend {name!r}; known: {', '.join(BACKENDS)}")
    module_name, cls_name = BACKENDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            f"rollout.backend {name!r} needs the {BACKEND_MODULES[name][0]!r} package (and "
            f"{module_name}); import failed: {exc}"
        ) from exc
    cls = getattr(module, cls_name)
    if device is not None and getattr(cls, "placeable", False):
        return cls(spec, model_dir, device=device)
    return cls(spec, model_dir)
