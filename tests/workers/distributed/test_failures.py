"""A rollout actor killed mid-run: the run fails with an event naming the actor, or, with
resources.max_restarts, a fresh fleet resumes from the last checkpoint."""

from __future__ import annotations

import os
import signal

import pytest
import ray

from tests.workers.distributed.conftest import RAY
from workers.distributed.fleet import ActorDied
from workers.train import train

pytestmark = pytest.mark.usefixtures("ray_local")


def kill_rollout_actor(index: int) -> int:
    """SIGKILL the process of the live fleet's rollout actor `index`; returns its pid."""
    names = ray.util.list_named_actors()
    (name,) = [n for n in names if n.endswith(f"-rollout-{index}")]
    pid = ray.get(ray.get_actor(name).where.remote())["pid"]
    os.kill(pid, signal.SIGKILL)
    return pid


def run_and_kill(make_spec, out, *overrides):
    events: list[dict] = []
    killed: list[int] = []

    def on_metrics(step, values):
        if step == 2 and not killed:
            killed.append(kill_rollout_actor(1))

    spec = make_spec("train.steps=4", "checkpoint.every=2", "resources.rollout_replicas=2",
                     *RAY, *overrides)  # fmt: skip
    try:
        return train(spec, out, progress=False, on_metrics=on_metrics, on_event=events.append)
    finally:
        run_and_kill.events, run_and_kill.killed = events, killed


def statuses(events):
    return [(e["state"], e["detail"]) for e in events if e["type"] == "status"]


def test_a_dead_rollout_actor_fails_the_run_with_a_clear_event(make_spec, tmp_path):
    mode = ["async.enabled=true", "async.max_staleness=1"]  # the failure is in the producer
    with pytest.raises(ActorDied, match=r"rollout actor 1 of 2 \(pid \d+ on .*\) died"):
        run_and_kill(make_spec, tmp_path, "resources.max_restarts=0", *mode)
    (pid,) = run_and_kill.killed
    *_, (state, detail) = statuses(run_and_kill.events)
    assert state == "failed"
    assert f"rollout actor 1 of 2 (pid {pid} on" in detail and "died" in detail


def test_with_max_restarts_the_run_resumes_from_its_checkpoint(make_spec, tmp_path):
    outcome = run_and_kill(make_spec, tmp_path, "resources.max_restarts=1")
    assert outcome.state == "succeeded" and outcome.step == 4
    events = run_and_kill.events
    assert [s for s, _ in statuses(events)] == ["running", "running", "succeeded"]
    assert statuses(events)[1] == ("running", "resumed")
    (restart,) = [e for e in events if e["type"] == "log" and "restart 1 of" in e["message"]]
    assert "rollout actor 1 of 2" in restart["message"]
    assert restart["message"].endswith(f"restart 1 of 1 from {tmp_path / 'checkpoints' / 'step-2'}")
    # steps 3 and 4 come from the resumed fleet; nothing after the kill was lost
    steps = [e["step"] for e in events if e["type"] == "metric"]
    assert steps[-2:] == [3, 4] and 2 in steps
