"""The environments' fixtures: the test package of environments written for Gymnasium and
verifiers."""

from __future__ import annotations

from pathlib import Path

import pytest

INSTALLED = Path(__file__).parent / "installed"


@pytest.fixture
def installed_envs(monkeypatch):
    """The test package on sys.path, its dist-info's entry points visible."""
    monkeypatch.syspath_prepend(str(INSTALLED))
