"""Small parts of the loop: control sources, the buffer, checkpoint retention."""

from __future__ import annotations

import asyncio

import pytest

from workers.loop import FileControl, StaticControl
from workers.loop.buffer import TrajectoryBuffer
from workers.loop.types import ScoredGroup
from workers.rollout.base import GroupResult, Sample


def group(step: int, versions: list[int]) -> ScoredGroup:
    samples = [Sample([1], [-0.1], [v], "stop", "x") for v in versions]
    return ScoredGroup(step, 0, "p", "a", GroupResult(f"s{step}", [1], samples), [1.0], [True])


def test_file_and_static_control(tmp_path):
    ctl = FileControl(tmp_path / "control")
    assert ctl.desired_state() == "running"
    (tmp_path / "control").write_text("paused\n")
    assert ctl.desired_state() == "paused"
    (tmp_path / "control").write_text("stop")
    with pytest.raises(ValueError, match="unknown desired state 'stop'"):
        ctl.desired_state()
    with pytest.raises(ValueError, match="unknown desired state"):
        StaticControl().set("halt")  # type: ignore[arg-type]


def test_staleness_filter_uses_the_oldest_token():
    fresh, stale = TrajectoryBuffer.filter_stale(
        [group(0, [3, 3]), group(1, [2, 3]), group(2, [1, 3])], trainer_version=3, max_staleness=1
    )
    assert [g.step for g in fresh] == [0, 1] and [g.step for g in stale] == [2]


def test_buffer_blocks_when_full_and_round_trips_its_state():
    async def go():
        buf = TrajectoryBuffer(capacity_groups=1)
        await buf.put(0, [group(0, [0])])
        blocked = asyncio.create_task(buf.put(1, [group(1, [0])]))
        await asyncio.sleep(0.01)
        assert not blocked.done()  # full: the producer waits for the trainer
        assert [g.step for g in await buf.take(0)] == [0]
        await blocked
        other = TrajectoryBuffer(4)
        other.load_state_dict(buf.state_dict())
        return other.steps()

    assert asyncio.run(go()) == [1]


def test_checkpoints_keep_last(make_spec, tmp_path):
    from workers.train import train

    train(make_spec("train.steps=3", "checkpoint.every=1", "checkpoint.keep_last=2"), tmp_path,
          progress=False)  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-2", "step-3"]
