"""FSDP2 over two trainer actors (gloo on CPU): the LoRA matrices are sharded with the base,
and loss and adapter match a one-actor run within fp32 tolerance."""

from __future__ import annotations

import json

import pytest
import ray
import torch

from tests.workers.distributed.conftest import RAY
from workers.policy.lora import read_adapter_dir
from workers.train import train

pytestmark = pytest.mark.usefixtures("ray_local")


def test_two_fsdp_ranks_match_one_actor(make_spec, tmp_path):
    layouts: list[dict] = []

    def on_metrics(step, values):
        if step == 1 and not layouts:
            names = sorted(n for n in ray.util.list_named_actors() if "-trainer-" in n)
            layouts.extend(ray.get([ray.get_actor(n).parameter_layout.remote() for n in names]))

    runs = {}
    for n in (1, 2):
        out = tmp_path / f"ranks-{n}"
        outcome = train(make_spec("train.steps=2", f"resources.trainer_actors={n}", *RAY), out,
                        progress=False, on_metrics=on_metrics if n == 2 else None)  # fmt: skip
        assert outcome.state == "succeeded"
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        runs[n] = (rows, read_adapter_dir(out / "checkpoints" / "step-2" / "adapter"))

    (one, (adapter1, v1)), (two, (adapter2, v2)) = runs[1], runs[2]
    assert v1 == v2 == 2
    for a, b in zip(one[1:], two[1:], strict=True):
        for key in ("loss/policy", "reward/mean", "entropy", "grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), key
    assert adapter1.keys() == adapter2.keys()
    for k in adapter1:
        torch.testing.assert_close(adapter1[k], adapter2[k], rtol=1e-5, atol=1e-6, msg=k)

    # both ranks hold half of every LoRA matrix and of every base weight, as DTensors
    assert len(layouts) == 2
    for layout in layouts:
        lora = {n: v for n, v in layout.items() if "lora_" in n}
        assert lora and all(kind == "DTensor" for kind, _, _ in lora.values())
        for _, local, full in lora.values():
            assert local[0] * 2 == full[0] and local[1:] == full[1:]
        q_base = next(v for n, v in layout.items() if n.endswith("q_proj.base_layer.weight"))
        assert q_base[0] == "DTensor" and q_base[1][0] * 2 == q_base[2][0]
