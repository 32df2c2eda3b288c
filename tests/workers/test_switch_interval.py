"""A run's GIL switch interval is held while runs are in flight and given back after the
last one, whatever order overlapping runs end in."""

from __future__ import annotations

import asyncio
import sys

import pytest

from workers.loop.switch_interval import held_switch_interval


@pytest.fixture
def interval():
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.004)
    yield
    sys.setswitchinterval(before)


def test_one_hold_sets_and_gives_back(interval):
    with held_switch_interval(0.0002):
        assert sys.getswitchinterval() == pytest.approx(0.0002)
    assert sys.getswitchinterval() == pytest.approx(0.004)


def test_none_leaves_the_interval_alone(interval):
    with held_switch_interval(None):
        assert sys.getswitchinterval() == pytest.approx(0.004)
    assert sys.getswitchinterval() == pytest.approx(0.004)


def test_overlapping_runs_give_it_back_after_the_last(interval):
    """Two coroutines (a pool's members) overlap; the first to end leaves it held."""
    seen: list[float] = []

    async def member(wait_s: float) -> None:
        with held_switch_interval(0.0002):
            await asyncio.sleep(wait_s)
            seen.append(sys.getswitchinterval())

    async def both() -> None:
        await asyncio.gather(member(0.01), member(0.05))

    asyncio.run(both())
    assert seen == [pytest.approx(0.0002)] * 2  # the later one still ran at the short one
    assert sys.getswitchinterval() == pytest.approx(0.004)


def test_an_exception_gives_it_back(interval):
    with pytest.raises(RuntimeError), held_switch_interval(0.0002):
        raise RuntimeError("the run failed")
    assert sys.getswitchinterval() == pytest.approx(0.004)
