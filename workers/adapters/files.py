"""Adapter versions as PEFT directories in RAM, for engines that load LoRA only from a path
(vLLM, TensorRT-LLM), and the comparison that closes the version handshake.

No peft import: the rollout side of a GPU cluster runs the engine's own environment, which
need not have it. The directory is what `peft.save_pretrained` writes (adapter_config.json +
adapter_model.safetensors) and both engines read.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from safetensors.torch import save_file

from ..spec import LoraSpec
from .update import AdapterUpdate

# Ranks vLLM compiles LoRA kernels for; TensorRT-LLM accepts any rank up to its maximum.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def supported_rank(r: int, ranks: tuple[int, ...] = VLLM_LORA_RANKS) -> int:
    """The smallest rank the engine supports that holds a rank-`r` adapter."""
    for rank in ranks:
        if rank >= r:
            return rank
    raise ValueError(f"lora.r={r} exceeds the largest rank the engine supports ({ranks[-1]})")


def ram_dir(prefix: str) -> Path:
    """A fresh directory on a RAM-backed filesystem (/dev/shm) when there is one: an adapter
    write then costs a memcpy, not a disk flush."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def peft_config(lora: LoraSpec, base_model: str) -> dict:
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": lora.r,
        "lora_alpha": lora.alpha,
        "lora_dropout": 0.0,
        "target_modules": list(lora.target_modules),
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "modules_to_save": None,
        "inference_mode": True,
    }


def write_version(update: AdapterUpdate, root: Path, lora: LoraSpec, base_model: str) -> Path:
    """Write `update` as a PEFT directory `root/v<version>` (copied when it is already a
    directory: the caller may delete its own, and the engine may reload from ours)."""
    out = root / f"v{update.version}"
    if out.exists():
        shutil.rmtree(out)
    if update.tensors is not None:
        out.mkdir(parents=True)
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in update.tensors.items()}
        save_file(tensors, str(out / "adapter_model.safetensors"))
        (out / "adapter_config.json").write_text(json.dumps(peft_config(lora, base_model)))
    elif update.path is not None:
        src = Path(update.path)
        if not (src / "adapter_model.safetensors").is_file():
            raise FileNotFoundError(f"adapter update {update.version}: no PEFT adapter in {src}")
        shutil.copytree(src, out)
    else:
        raise ValueError(f"adapter update {update.version} has neither tensors nor a path")
    return out


def remove_versions(root: Path, keep: set[Path]) -> None:
    for path in root.glob("v*"):
        if path not in keep:
            shutil.rmtree(path, ignore_errors=True)
