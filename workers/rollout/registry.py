"""Backends by name. Engines are imported only when chosen, so a cluster without vLLM can
still run the torch backend, and a missing engine fails with its package name."""

from __future__ import annotations

import importlib
from pathlib import Path

from ..spec import RunSpec
from .base import RolloutBackend

# name → (module, class, pip package the engine needs)
BACKENDS: dict[str, tuple[str, str, str]] = {
    "torch": ("workers.rollout.torch_backend", "TorchBackend", "torch"),
    "vllm": ("workers.rollout.vllm_backend", "VllmBackend", "vllm"),
    "trtllm": ("workers.rollout.trtllm_backend", "TrtllmBackend", "tensorrt_llm"),
}


def make_backend(spec: RunSpec, model_dir: str | Path) -> RolloutBackend:
    name = spec.rollout.backend
    if name not in BACKENDS:
        raise KeyError(f"unknown rollout backend {name!r}; known: {', '.join(BACKENDS)}")
    module_name, cls_name, package = BACKENDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            f"rollout.backend {name!r} needs the {package!r} package (and {module_name}); "
            f"import failed: {exc}"
        ) from exc
    return getattr(module, cls_name)(spec, model_dir)
