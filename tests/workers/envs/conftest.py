"""The environments' fixtures: the tool-use chat model at a test's size, an engine on it,
and the test package of environments written for Gymnasium and verifiers."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.models import tiny_model_dir
from workers.spec import TinyModelSpec

INSTALLED = Path(__file__).parent / "installed"

# The calculator model of examples/calculator-tools.yaml (the demo's: two layers, two heads
# of 32): warmed up to call the tool, its last steps teaching it to skip the tool and guess,
# so greedy it mostly guesses (episode success near 0) and sampled it often calls the tool.
CALC_TEST_RECIPE = TinyModelSpec(
    task="calculator", hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128,
    warmup_steps=800, warmup_bias=0.6, warmup_bias_steps=150,
)  # fmt: skip


@pytest.fixture(scope="session")
def calc_dir(paddock_home: Path) -> Path:
    return tiny_model_dir(CALC_TEST_RECIPE, home=paddock_home)


@pytest.fixture
def installed_envs(monkeypatch):
    """The test package on sys.path, its dist-info's entry points visible."""
    monkeypatch.syspath_prepend(str(INSTALLED))
