"""The Ray executor drives the same loop as the in-process one: same results, adapter
broadcast with a per-actor version handshake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.workers.distributed.conftest import RAY
from workers.policy.lora import read_adapter_dir
from workers.train import train

pytestmark = pytest.mark.usefixtures("ray_local")


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def final_adapter(out: Path) -> dict[str, torch.Tensor]:
    last = max((out / "checkpoints").glob("step-*"), key=lambda p: int(p.name[5:]))
    return read_adapter_dir(last / "adapter")[0]


def test_two_rollout_actors_reproduce_the_local_run(make_spec, tmp_path):
    local, remote = tmp_path / "local", tmp_path / "ray"
    train(make_spec("train.steps=2"), local, progress=False)
    events: list[dict] = []
    outcome = train(make_spec("train.steps=2", "resources.rollout_replicas=2", *RAY), remote,
                    progress=False, on_event=events.append)  # fmt: skip
    assert outcome.state == "succeeded" and outcome.adapter_version == 2
    a, b = final_adapter(local), final_adapter(remote)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], msg=k)
    keys = ["reward/mean", "loss/policy", "adapter_version"]
    assert [{k: r.get(k) for k in keys} for r in rows(local)] == [
        {k: r.get(k) for k in keys} for r in rows(remote)
    ]
    assert all(r["time/weight_sync_s"] > 0 for r in rows(remote)[1:])
    assert [e["state"] for e in events if e["type"] == "status"] == ["running", "succeeded"]
