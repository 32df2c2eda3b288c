"""`paddock sweeps` against a live server (real HTTP, a real token): launch (grid, random,
refused), list, get with its members, stop; and how --param reads."""

from __future__ import annotations

import pytest
import typer

from paddock.sweeps.models import Sweep
from paddock_client.cli_sweeps import parse_params

pytestmark = [pytest.mark.usefixtures("quiet_hooks"), pytest.mark.django_db(transaction=True)]


def test_param_reads_values_as_json_and_ranges_with_their_flags():
    assert parse_params(["lora.r=8,16", "train.lr=1e-3, 3e-3", "algorithm.advantage=grpo,rloo",
                         "algorithm.dynamic_sampling=true,false"]) == {  # fmt: skip
        "lora.r": [8, 16], "train.lr": [0.001, 0.003], "algorithm.advantage": ["grpo", "rloo"],
        "algorithm.dynamic_sampling": [True, False],
    }  # fmt: skip
    assert parse_params(["train.lr=log:1e-4..1e-2", "lora.r=int:4..64", "x=-1..1.5"]) == {
        "train.lr": {"min": 1e-4, "max": 1e-2, "log": True, "int": False},
        "lora.r": {"min": 4, "max": 64, "log": False, "int": True},
        "x": {"min": -1, "max": 1.5, "log": False, "int": False},
    }
    for bad in (["lora.r"], ["lora.r=8", "lora.r=16"], ["x=a..b"], ["=8"]):
        with pytest.raises(typer.BadParameter):
            parse_params(bad)


def test_sweeps_launch_list_get_stop(cli, world, tmp_path):
    spec = tmp_path / "base.yaml"
    spec.write_text("train:\n  steps: 5\nrollout:\n  max_new_tokens: 4\n")
    code, out, err = cli("sweeps", "launch", spec, "--param", "lora.r=8,16",
                         "--param", "train.lr=1e-3,3e-3", "--parallel", "1",
                         "--stop", "median", "--min-steps", "2", "--tag", "cli")  # fmt: skip
    assert code == 0, err
    sweep = Sweep.objects.get()
    assert out.startswith(f"sweep {sweep.pk} 'base' (experiment {sweep.experiment_id}): "
                          "4 members, 1 at once")  # fmt: skip
    assert sweep.stopping == {"rule": "median", "min_steps": 2, "min_members": 3}
    assert [r["id"] for r in cli.json("sweeps", "list")] == [sweep.pk]
    got = cli.json("sweeps", "get", sweep.pk)
    assert [m["settings"] for m in got["members"]] == [
        {"lora.r": 8, "train.lr": 0.001}, {"lora.r": 8, "train.lr": 0.003},
        {"lora.r": 16, "train.lr": 0.001}, {"lora.r": 16, "train.lr": 0.003},
    ]  # fmt: skip
    assert [m["state"] for m in got["members"]] == ["active", "pending", "pending", "pending"]
    code, out, _ = cli("sweeps", "get", sweep.pk)
    assert code == 0 and "LORA.R" in out and "TRAIN.LR" in out and "pending" in out
    code, out, _ = cli("sweep", "stop", sweep.pk)  # the singular works too
    assert code == 0 and out.strip() == f"sweep {sweep.pk}: stopping (stopped by a-admin)"
    code, _, err = cli("sweeps", "launch", spec, "--param", "lora.r=0,8")
    assert code == 1 and "sweep_member_invalid (params.lora.r)" in err and "member 0" in err
    code, out, err = cli("sweeps", "launch", spec, "--method", "random", "--members", "3",
                         "--param", "train.lr=log:1e-4..1e-2", "--validate-only")  # fmt: skip
    assert code == 0 and out.strip() == "valid: 3 member(s), 3 at once", err
    code, _, err = cli("sweeps", "launch", spec, "--param", "lora.r=8", "--stop", "median")
    assert code == 2 and "--min-steps" in err
    assert Sweep.objects.count() == 1
