"""Loading a base model with a PEFT LoRA adapter, and moving adapters in and out of it.

The adapter is applied unmerged (PEFT's LoRA layers add B·A·x beside the frozen base): the
base weights are never rewritten, so trainer and engine see the same base bits.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.utils import get_peft_model_state_dict
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from ..spec import LoraSpec, ModelSpec, RunSpec
from .packed import PackedTensors
from .rows_lora import RowsLinear

ADAPTER_NAME = "default"
VERSION_FILE = "paddock_adapter.json"


def load_tokenizer(model_dir: str | Path) -> PreTrainedTokenizerBase:
    tok = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=False)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def base_dtype(model: ModelSpec, device: torch.device) -> torch.dtype:
    """bf16 base weights on a GPU unless the spec asks for float32: the frozen base is then
    read once a step in its own dtype instead of being cast by autocast at every forward
    (and the rollout engine decodes in bf16). On CPU, float32."""
    if device.type == "cuda" and model.dtype in ("auto", "bfloat16"):
        return torch.bfloat16
    return torch.float32


def lora_config(lora: LoraSpec, rows: bool = False) -> LoraConfig:
    """The PEFT config of the spec's adapter (unbiased, causal LM), for every trained adapter.
    `rows`: its linear layers are `RowsLinear` (PEFT's, which can also run several adapters
    on blocks of rows: rows_lora.py), as the trainer's are; what the config makes when it
    first puts LoRA on a module (PEFT's custom-module hook)."""
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    if rows:
        config._register_custom_module({torch.nn.Linear: RowsLinear})
    return config


def load_lora_model(
    model_dir: str | Path,
    lora: LoraSpec,
    device: torch.device,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    rows: bool = False,
) -> PeftModel:
    """Base model in `dtype` (see `base_dtype`) with a fresh LoRA adapter, whose weights stay
    float32 whatever the base's (PEFT's autocast_adapter_dtype). `seed` fixes the adapter's
    initial A matrices (B starts at zero, so the policy starts at the base either way)."""
    base = AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=dtype, trust_remote_code=False
    ).to(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = get_peft_model(base, lora_config(lora, rows))
    return model


def load_spec_model(
    model_dir: str | Path, spec: RunSpec, device: torch.device, rows: bool = False
) -> PeftModel:
    """The run's model with its fresh adapter, as the trainer and the torch engine both load
    it: the same seed, so both start from the same adapter."""
    dtype = base_dtype(spec.model, device)
    return load_lora_model(model_dir, spec.lora, device, seed=spec.seed, dtype=dtype, rows=rows)


def peft_index(model: PeftModel, name: str) -> dict[str, torch.Tensor]:
    """PEFT's file key (without the adapter's name) → adapter `name`'s parameter tensor
    (sharing its storage): the adapter as files and engines name it."""
    return get_peft_model_state_dict(model, adapter_name=name)


def lora_index(model: PeftModel) -> dict[str, torch.Tensor]:
    """`peft_index` of the model's one adapter, computed once a model: PEFT's state-dict
    helpers walk the whole model's state dict each call, which cost more than moving the
    adapter's bytes."""
    index = getattr(model, "_paddock_lora_index", None)
    if index is None:
        index = peft_index(model, ADAPTER_NAME)
        model._paddock_lora_index = index
    return index


def adapter_tensors(model: PeftModel) -> dict[str, torch.Tensor]:
    """The adapter as a CPU tensor dict with PEFT's file key names (a detached copy)."""
    return move_tensors(lora_index(model), torch.device("cpu"))


def move_tensors(tensors: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Copies of `tensors` on `device`, moved in one transfer per dtype (see PackedTensors).
    On the CPU each has its own storage (what file writers need); on a GPU they are views
    of one buffer, about to be copied into parameters."""
    packed = PackedTensors.pack(tensors).to(device)
    return packed.unpack(separate=device.type == "cpu")


def load_adapter_tensors(model: PeftModel, tensors: dict[str, torch.Tensor]) -> None:
    """Copy `tensors` (PEFT file keys) into the adapter's parameters: one transfer to their
    device, then one batched copy."""
    copy_into(lora_index(model), tensors)


def update_tensors(update) -> dict[str, torch.Tensor]:
    """An `AdapterUpdate`'s tensors: its own, or read from the PEFT directory it names."""
    if update.tensors is not None:
        return update.tensors
    if update.path is not None:
        return read_adapter_dir(update.path)[0]
    raise ValueError(f"adapter update {update.version} has neither tensors nor a path")


def copy_into(
    index: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor], who: str = ""
) -> None:
    """Copy `tensors` (PEFT file keys) into the parameters `index` names (one adapter's, of
    a model that may hold several): one transfer to their device, then one batched copy."""
    unexpected = [k for k in tensors if k not in index and "lora_" in k]
    if unexpected:
        raise ValueError(f"{who}adapter has keys this model lacks: {unexpected[:3]}…")
    keys = [k for k in index if k in tensors]
    device = index[keys[0]].device if keys else torch.device("cpu")
    if any(tensors[k].device != device for k in keys):
        tensors = move_tensors({k: tensors[k] for k in keys}, device)
    with torch.no_grad():
        torch._foreach_copy_([index[k] for k in keys], [tensors[k] for k in keys])


def write_adapter_dir(
    out: str | Path, config: LoraConfig, tensors: dict[str, torch.Tensor], version: int
) -> Path:
    """A PEFT adapter directory (adapter_config.json + adapter_model.safetensors) that `peft`
    and vLLM load as it is, plus a small file naming its version."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(str(out))
    write_adapter_file(tensors, out / "adapter_model.safetensors")
    (out / VERSION_FILE).write_text(json.dumps({"adapter_version": version}))
    return out


def save_adapter_dir(model: PeftModel, out: str | Path, version: int) -> Path:
    """`write_adapter_dir` of a model's one adapter."""
    tensors = adapter_tensors(model)
    return write_adapter_dir(out, model.peft_config[ADAPTER_NAME], tensors, version)


def read_adapter_dir(path: str | Path) -> tuple[dict[str, torch.Tensor], int]:
    path = Path(path)
    file = path / "adapter_model.safetensors"
    if not file.is_file():
        raise FileNotFoundError(f"no adapter_model.safetensors in {path}")
    meta = path / VERSION_FILE
    version = json.loads(meta.read_text())["adapter_version"] if meta.is_file() else 0
    return load_file(str(file)), int(version)


def write_adapter_file(tensors: dict[str, torch.Tensor], path: str | Path) -> None:
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
