"""vLLM on a GPU: the rollout conformance contract (tests/workers/rollout/test_conformance.py:
generate, n samples and EOS, stop strings, seeds, the version handshake, pause with abort,
keep and wait, resume, abort, aborted partials resubmitted) run as it is against VllmBackend
in bf16, on a Qwen3-0.6B-shaped model at random init (28 layers, hidden 1024, 16 heads of
128, 8 KV heads; the char tokenizer's 53-token vocabulary, so that stop strings and EOS are
sampled), its trainer a bf16 LoraPolicy on the same GPU; every EOS id of the suite's chat
model stops a sample (test_eos.py's check); and the memory split is checked at launch.

The engine runs eagerly (`rollout.enforce_eager`: a start in seconds instead of minutes of
compile and graph capture); bench/gpu/rollout.py runs it compiled with CUDA graphs. With
vLLM's GPU build and pytest-asyncio importable (the contract's module imports it):

    PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -m pytest -c /dev/null --noconftest \
        -p no:cacheprovider -q tests/workers/gpu/test_vllm_backend.py
"""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest
import torch

from workers.models import tiny_model_dir
from workers.policy import LoraPolicy
from workers.spec import parse_spec

from ..conftest import CHAT_TEST_RECIPE
from .small_qwen3 import build_small_qwen3

pytest.importorskip("pytest_asyncio", reason="the conformance module imports pytest-asyncio")
from ..rollout import conftest as rollout_conftest  # noqa: E402
from ..rollout import test_conformance as contract  # noqa: E402
from ..rollout import test_eos as eos  # noqa: E402

pytestmark = pytest.mark.gpu
SHAPE = dict(  # Qwen3-0.6B's sizes but the vocabulary (the char tokenizer's)
    vocab_size=53,
    hidden_size=1024,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=3072,
)
# two engines side by side at most (this model's, then the chat model's) beside the trainer
ENGINE = {"enforce_eager": True, "gpu_memory_utilization": 0.25}
BF16_TOL = 1.05  # the contract's mean exp|Δ| in bf16 (NeMo-RL's guard)
BF16_ATOL = 0.25  # one token's |Δ logprob| in bf16, the chat model's EOS check


def gpu_spec(model_dir: Path, backend: str, **rollout):
    """The contract's spec with trainer and engine on the GPU (bf16 on both sides)."""
    spec = rollout_conftest.engine_spec(model_dir, backend, **rollout).to_dict()
    spec["resources"].update(trainer_gpus=1, rollout_gpus=1)
    return parse_spec(spec)


class GpuTrainer(contract.Trainer):
    """The contract's trainer on the GPU, in bf16 as a run trains there."""

    def __init__(self, model_dir: Path):
        self.spec = gpu_spec(model_dir, "torch")
        self.policy = LoraPolicy(self.spec, model_dir)
        self.tok = self.policy.tokenizer


def contract_cases() -> list:
    """Every test of the contract, with its parameters expanded."""
    cases = []
    for name, fn in vars(contract).items():
        if not (name.startswith("test_") and inspect.iscoroutinefunction(fn)):
            continue
        grid = [{}]
        for mark in getattr(fn, "pytestmark", []):
            if mark.name == "parametrize":
                argname, values = mark.args
                assert "," not in argname, f"{name}: one parameter a parametrize"
                grid = [dict(g, **{argname: v}) for g in grid for v in values]
        for kw in grid:
            label = name.removeprefix("test_") + "".join(f"[{v}]" for v in kw.values())
            cases.append(pytest.param(name, kw, id=label))
    return cases


@pytest.fixture(scope="module")
def loop():
    """The module's one event loop: the engine is bound to the loop it first ran on."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    pytest.importorskip("vllm", reason="vLLM's GPU build is not installed")
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def model_dir(loop, tmp_path_factory) -> Path:
    """Random init. (Scaling the digits' embedding rows up, so that a stop string of a digit
    was sampled, made the bf16 handshake fail on the H200 for the contract's wild adapters:
    logits 4× as large, errors too. The stop-string test now picks its stop from what the
    model samples.)"""
    return build_small_qwen3(tmp_path_factory.mktemp("qwen3-0.6b-chars"), "cuda", **SHAPE)


@pytest.fixture(scope="module")
def engine(loop, model_dir):
    from workers.rollout.vllm_backend import VllmBackend

    async def start():
        return VllmBackend(gpu_spec(model_dir, "vllm", **ENGINE), model_dir)

    backend = loop.run_until_complete(start())
    yield backend
    loop.run_until_complete(backend.close())


@pytest.fixture(scope="module")
def trainer(loop, model_dir) -> GpuTrainer:
    return GpuTrainer(model_dir)


@pytest.mark.parametrize(("case", "kwargs"), contract_cases())
def test_contract(case, kwargs, loop, engine, trainer, monkeypatch):
    test = getattr(contract, case)
    monkeypatch.setattr(contract, "MULT_PROB_TOL", BF16_TOL)
    if "monkeypatch" in inspect.signature(test).parameters:
        kwargs = dict(kwargs, monkeypatch=monkeypatch)
    try:
        loop.run_until_complete(test(engine, trainer, **kwargs))
    finally:  # a test that fails while paused must not leave the next one at the gate
        loop.run_until_complete(engine.resume())


def test_keep_is_native_where_the_engine_labels_versions(engine):
    """vLLM 0.32 stamps each token with the engine's weight version, so a keep pause
    freezes requests in the engine; 0.26 cannot, and the backend cuts and continues them."""
    labels = hasattr(engine.llm, "update_weight_version")
    assert engine.native_keep is labels


def test_memory_split_is_checked_at_launch(loop, engine, model_dir):
    """With this module's engine holding a quarter of the card, a second one that asks for
    90 % is refused before any engine process starts, naming the spec's field."""
    from workers.rollout.vllm_backend import VllmBackend, check_memory_split

    check_memory_split(0.25)
    spec = gpu_spec(model_dir, "vllm", enforce_eager=True, gpu_memory_utilization=0.9)
    with pytest.raises(ValueError, match=r"rollout\.gpu_memory_utilization=0\.9 asks vLLM"):
        VllmBackend(spec, model_dir)


def test_every_eos_id_of_the_chat_model_stops_a_sample(loop, tmp_path_factory):
    """The suite's chat model (byte-level BPE, chat template, two EOS ids), relabelled as
    test_eos.py does, on a second engine."""
    chat = tiny_model_dir(CHAT_TEST_RECIPE)
    relabelled = eos.Relabelled(
        chat,
        tmp_path_factory.mktemp("relabelled") / "model",
        [("<|im_end|>", ","), ("<|endoftext|>", "boxed")],
    )
    spec = gpu_spec(relabelled.dir, "vllm", **ENGINE)
    loop.run_until_complete(eos.vllm_stops_at_every_eos(spec, relabelled, atol=BF16_ATOL))
