"""Pause / resume / abort reach the actors: a pause aborts in-flight generation on the rollout
actors (partials stay in the checkpointed buffer) and checkpoints; release_on_pause exits and
frees the actors (resuming from a checkpoint in a new fleet: test_failures); a held pause
resumes in place."""

from __future__ import annotations

import threading

import pytest
import ray
import torch

from tests.workers.distributed.conftest import RAY
from workers.loop import StaticControl
from workers.train import train

pytestmark = pytest.mark.usefixtures("ray_local")

ASYNC = ["async.enabled=true", "async.max_staleness=1", *RAY]


def status_events(events):
    return [e.state for e in events if e.type == "status"]


def test_pause_with_release_checkpoints_and_frees_the_actors(make_spec, tmp_path):
    control, events = StaticControl(), []

    def on_metrics(step, values):
        if step == 2:
            control.set("paused")

    spec = make_spec("train.steps=4", "resources.release_on_pause=true", *ASYNC)
    outcome = train(spec, tmp_path, progress=False, control=control,
                    on_metrics=on_metrics, on_event=events.append)  # fmt: skip
    assert outcome.state == "paused" and outcome.step == 2
    assert status_events(events) == ["running", "paused"]
    assert ray.util.list_named_actors() == []  # the fleet is gone with the job's resources
    # the rollout side was one step ahead: that step, whole or cut short, is in the checkpoint
    buffer = torch.load(outcome.checkpoint / "buffer.pt", weights_only=False)
    assert 2 in buffer["steps"] or 2 in buffer["pending"]


def test_a_held_pause_resumes_in_place_and_abort_stops(make_spec, tmp_path):
    control, events = StaticControl(), []

    def on_event(e):
        events.append(e)
        if e.type == "status" and e.state == "paused":
            threading.Timer(0.5, control.set, ["running"]).start()

    def on_metrics(step, values):
        if step == 1:
            control.set("paused")
        if step == 3:
            control.set("aborted")

    outcome = train(make_spec("train.steps=6", *ASYNC), tmp_path, progress=False,
                    control=control, on_metrics=on_metrics, on_event=on_event)  # fmt: skip
    assert status_events(events) == ["running", "paused", "running", "aborted"]
    assert outcome.state == "aborted" and outcome.step == 3
