"""A rollout actor killed mid-run: while resources.max_restarts allows, a fresh fleet resumes
from the last checkpoint; past it, the run fails with an event naming the actor."""

from __future__ import annotations

import os
import signal

import pytest
import ray

from tests.workers.distributed.conftest import RAY
from workers.distributed.fleet import ActorDied
from workers.events import Event
from workers.train import train

pytestmark = pytest.mark.usefixtures("ray_local")


def kill_rollout_actor() -> int:
    """SIGKILL the process of the live fleet's rollout actor; returns its pid."""
    (name,) = [n for n in ray.util.list_named_actors() if n.endswith("-rollout-0")]
    pid = ray.get(ray.get_actor(name).where.remote())["pid"]
    os.kill(pid, signal.SIGKILL)
    return pid


def test_a_killed_rollout_actor_restarts_from_the_checkpoint_then_fails_the_run(
    make_spec, tmp_path
):
    events: list[Event] = []
    killed: list[int] = []

    def on_metrics(step, values):  # kill at step 2 (checkpointed), again after the restart
        if (step, len(killed)) in ((2, 0), (3, 1)):
            killed.append(kill_rollout_actor())

    spec = make_spec("train.steps=5", "checkpoint.every=2", "resources.max_restarts=1",
                     "async.enabled=true", "async.max_staleness=1", *RAY)  # fmt: skip
    with pytest.raises(ActorDied, match=r"rollout actor 0 of 1 \(pid \d+ on .*\) died"):
        train(spec, tmp_path, progress=False, on_metrics=on_metrics, on_event=events.append)

    first, second = killed
    (restart,) = [e for e in events if e.type == "log" and "restart 1 of" in e.message]
    assert f"rollout actor 0 of 1 (pid {first} on" in restart.message
    assert restart.message.endswith(f"restart 1 of 1 from {tmp_path / 'checkpoints' / 'step-2'}")
    statuses = [(e.state, e.detail) for e in events if e.type == "status"]
    assert [s for s, _ in statuses] == ["running", "running", "failed"]
    assert statuses[1] == ("running", "resumed")
    assert f"rollout actor 0 of 1 (pid {second} on" in statuses[2][1]
    # step 3 was trained by the resumed fleet (from step 2's checkpoint)
    steps = [e.step for e in events if e.type == "metric"]
    assert steps.count(3) == 1 and steps.index(3) > steps.index(2)
