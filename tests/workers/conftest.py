"""Fixtures of the data-plane tests: the tiny model (built once, cached across sessions under
the session's PADDOCK_HOME) and small specs that run in seconds on 2 CPU cores."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from workers.models import tiny_model_dir
from workers.spec import TinyModelSpec, apply_overrides

REPO = Path(__file__).resolve().parents[2]

# A second intra-op thread per process only adds contention on a shared 2-core machine.
# PADDOCK_TEST_THREADS=2 with a fresh PADDOCK_HOME builds the tiny model with other float
# reductions: a cheap stand-in for another machine, to catch tests that assert what one
# build of the model happened to sample.
torch.set_num_threads(int(os.environ.get("PADDOCK_TEST_THREADS", "1")))


@pytest.fixture(scope="session")
def paddock_home() -> Path:
    return _home()


def _home() -> Path:
    home = Path(os.environ.get("PADDOCK_HOME", REPO / ".paddock" / "test"))
    home.mkdir(parents=True, exist_ok=True)
    return home


@pytest.fixture(scope="session")
def tiny_dir(paddock_home: Path) -> Path:
    """The default tiny model (a minute to build the first time, then cached)."""
    return tiny_model_dir(TinyModelSpec(), home=paddock_home)


# The chat model of the reasoning task at a test's size: half the layers and a fifth of the
# warm-up of examples/chat-reasoning.yaml's (under a minute to build on 2 cores, then
# cached). It learns the chain's layout (digits, `+`, `=`, `,`, `\boxed{}`, `<|im_end|>`),
# not all the sums. Two heads: head_dim 32, the smallest vLLM's CPU attention supports.
CHAT_TEST_RECIPE = TinyModelSpec(
    task="reasoning", hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128,
    warmup_steps=300, warmup_bias=0.6, warmup_bias_steps=50,
)  # fmt: skip


@pytest.fixture(scope="session")
def chat_dir(paddock_home: Path) -> Path:
    """The reasoning task's chat model (byte-level BPE, chat template, two EOS ids)."""
    return tiny_model_dir(CHAT_TEST_RECIPE, home=paddock_home)


# The calculator model of examples/calculator-tools.yaml (the demo's: two layers, two heads
# of 32): warmed up to call the tool, its last steps teaching it to skip the tool and guess,
# so greedy it mostly guesses (episode success near 0) and sampled it often calls the tool.
CALC_TEST_RECIPE = TinyModelSpec(
    task="calculator", hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128,
    warmup_steps=800, warmup_bias=0.6, warmup_bias_steps=150,
)  # fmt: skip


@pytest.fixture(scope="session")
def calc_dir(paddock_home: Path) -> Path:
    """The calculator environment's tool-use chat model."""
    return tiny_model_dir(CALC_TEST_RECIPE, home=paddock_home)


# The models each fixture builds. The ones the collected tests ask for are built before the
# first test starts: a build takes seconds to minutes (the calculator model 200 s on a quiet
# 2-core machine, over 500 s on a loaded one), and inside the setup of the first test that
# needs it, it would count against that test's timeout.
MODEL_FIXTURES = {
    "tiny_dir": TinyModelSpec(),
    "chat_dir": CHAT_TEST_RECIPE,
    "calc_dir": CALC_TEST_RECIPE,
}


def pytest_collection_finish(session: pytest.Session) -> None:
    wanted = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    recipes = [recipe for name, recipe in MODEL_FIXTURES.items() if name in wanted]
    if recipes and not session.config.option.collectonly:
        home = _home()
        for recipe in recipes:
            tiny_model_dir(recipe, home=home)


@pytest.fixture
def make_spec(tiny_dir: Path):
    """A small, fast spec on the tiny model; `make_spec("train.steps=4", ...)` overrides."""

    def make(*overrides: str, **sections: Any) -> dict[str, Any]:
        base: dict[str, Any] = {
            "model": {"path": str(tiny_dir)},
            "lora": {"r": 8, "alpha": 16, "target_modules": [
                "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]},
            "algorithm": {"num_generations": 4},
            "rollout": {"backend": "torch", "max_new_tokens": 4},
            "train": {"steps": 3, "prompts_per_step": 4, "lr": 2e-3, "eval_every": 0,
                      "micro_batch_size": 8, "threads": 1},
            "data": {"eval_size": 24},
            "seed": 3,
        }  # fmt: skip
        base.update(sections)
        return apply_overrides(base, list(overrides))

    return make
