"""The Ray executor drives the same loop as the in-process one. One run covers the whole
path: 2 FSDP2 trainer ranks (gloo) and 2 rollout actors against an in-process run of the
same spec: loss and adapter match within fp32 tolerance, and the base was sharded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import ray
import torch

from tests.workers.distributed.conftest import RAY
from tests.workers.test_model_build_progress import SMALL, assert_built_before_the_first_step
from workers.adapters.lora import read_adapter_dir
from workers.events import Event
from workers.models import recipe_hash
from workers.models.tiny import paddock_home
from workers.train import train

pytestmark = pytest.mark.usefixtures("ray_local")


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_fsdp_ranks_and_rollout_actors_match_the_in_process_run(make_spec, tmp_path):
    local, remote = tmp_path / "local", tmp_path / "ray"
    train(make_spec("train.steps=2"), local, progress=False)

    layouts: list[dict] = []
    events: list[Event] = []

    def on_metrics(step, values):
        if step == 1:
            names = sorted(n for n in ray.util.list_named_actors() if "-trainer-" in n)
            layouts.extend(ray.get([ray.get_actor(n).parameter_layout.remote() for n in names]))

    spec = make_spec("train.steps=2", "resources.trainer_actors=2",
                     "resources.rollout_replicas=2", *RAY)  # fmt: skip
    outcome = train(spec, remote, progress=False, on_metrics=on_metrics, on_event=events.append)
    assert outcome.state == "succeeded" and outcome.adapter_version == 2
    assert [e.state for e in events if e.type == "status"] == ["running", "succeeded"]

    for a, b in zip(rows(local), rows(remote), strict=True):
        assert a.get("reward/mean") == b.get("reward/mean")  # same samples, split over actors
        for key in ("loss/policy", "entropy", "grad_norm", "eval/accuracy"):
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), key
    assert all(r["time/weight_sync_s"] > 0 for r in rows(remote)[1:])

    want, v1 = read_adapter_dir(local / "checkpoints" / "step-2" / "adapter")
    got, v2 = read_adapter_dir(remote / "checkpoints" / "step-2" / "adapter")
    assert v1 == v2 == 2 and want.keys() == got.keys()
    for k in want:
        # Adam's first steps move each element by about lr·sign(grad): where a gradient is
        # near zero (|g| ~ eps), the ranks' summation order can move it by a fraction of lr.
        # The losses, grad norms and entropies above hold the runs equal to 1e-5; here no
        # element may be off by more than half a step (lr 2e-3), measured at most 4e-4.
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=1e-3, msg=k)
    assert any(v.abs().sum() > 0 for k, v in got.items() if "lora_B" in k)  # it trained

    # each rank holds half of the base weights, as DTensors, and the whole (small) adapter
    assert len(layouts) == 2
    for layout in layouts:
        lora = [v for n, v in layout.items() if "lora_" in n]
        assert lora and all(kind == "Tensor" and local == full for kind, local, full in lora)
        q_base = next(v for n, v in layout.items() if n.endswith("q_proj.base_layer.weight"))
        assert q_base[0] == "DTensor" and q_base[1][0] * 2 == q_base[2][0]


def test_a_tiny_models_build_is_logged_before_the_fleet_starts(make_spec, tmp_path):
    """The driver builds the tiny model first, its progress in the run's log; the actors
    (on this machine, under the same PADDOCK_HOME) then find it built. Before, the fleet's
    start built it in the actors, and the run's log said nothing of it."""
    recipe = SMALL.model_copy(update={"warmup_steps": SMALL.warmup_steps + 1})  # this test's
    shutil.rmtree(paddock_home() / "models" / f"tiny-{recipe_hash(recipe)}", ignore_errors=True)
    events: list[Event] = []
    spec = make_spec("train.steps=1", *RAY, model={"tiny": recipe.model_dump()})
    train(spec, tmp_path / "run", progress=False, on_event=events.append)
    assert_built_before_the_first_step(events, recipe)
