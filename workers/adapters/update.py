"""What a trainer publishes and an engine loads: an adapter version (its tensors, or a PEFT
directory), with the probe that closes the version handshake. The trainer makes the probe
(`adapter_probe`: its logprobs of a fixed continuation); an engine that is not in the
trainer's process proves it serves the version by reproducing them (`check_probe`).

torch only: the engines' side of a GPU cluster imports it without peft."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AdapterProbe:
    """The trainer's logprobs of a fixed continuation under one adapter version, at
    temperature 1: an engine proves it serves that version by reproducing them."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]  # log p(token_ids[i] | prompt_ids + token_ids[:i])


@dataclass
class AdapterUpdate:
    version: int
    # PEFT key names; on the trainer's device in-process, on the CPU across hosts
    tensors: dict[str, torch.Tensor] | None = None
    path: str | None = None  # or a PEFT adapter directory
    probe: AdapterProbe | None = None  # for the version handshake of remote engines


@torch.no_grad()
def adapter_probe(model: torch.nn.Module, vocab_size: int, length: int = 16) -> AdapterProbe:
    """The trainer's side of the version handshake: logprobs (temperature 1, eval mode) of a
    fixed token sequence that depends only on the vocabulary size."""
    ids = [(7 * i + 3) % vocab_size for i in range(length)]
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        # use_cache=False: a KV cache would be a guard per layer under train.compile (each
        # compiled layer reads its own slot of it) and recompile every layer
        ids_t = torch.tensor([ids], device=device)
        logits = model(input_ids=ids_t, use_cache=False).logits[0].float()  # [L, V]
    finally:
        model.train(was_training)
    lp = torch.log_softmax(logits[:-1], dim=-1).gather(
        1, torch.tensor(ids[1:], device=device)[:, None]
    )
    half = length // 2
    return AdapterProbe(ids[:half], ids[half:], lp[half - 1 :, 0].tolist())


def probe_tolerance(dtype: torch.dtype | str) -> float:
    """Largest |Δ logprob| the handshake accepts: fp32 engines agree with the trainer to
    ~1e-5; bf16 kernels to a few hundredths."""
    return 2e-3 if str(dtype).removeprefix("torch.") == "float32" else 0.15


def check_probe(
    engine: str, version: int, expected: AdapterProbe, got: list[float], atol: float
) -> float:
    """Raise unless the engine's probe logprobs match the trainer's; returns the max |Δ|."""
    if len(got) != len(expected.logprobs):
        raise RuntimeError(
            f"{engine}: version handshake for adapter {version}: the probe returned "
            f"{len(got)} logprobs, expected {len(expected.logprobs)}"
        )
    err = max((abs(a - b) for a, b in zip(got, expected.logprobs, strict=True)), default=0.0)
    if not math.isfinite(err) or err > atol:
        raise RuntimeError(
            f"{engine}: version handshake for adapter {version} failed: the engine's probe "
            f"logprobs differ from the trainer's by up to {err:.3g} (> {atol:g}); the engine "
            "is not serving this adapter"
        )
    return err
