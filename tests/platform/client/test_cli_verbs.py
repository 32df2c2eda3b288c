"""Every verb of the `paddock` command against a live server (real HTTP, a real token):
what it prints, what it changes on the platform, and its exit code when refused."""

from __future__ import annotations

import csv
import io
import json
import tarfile

import pyarrow.parquet as pq
import pytest
import requests
import torch
from safetensors.torch import load_file

from paddock.experiments.metrics import metric_points_store
from paddock.experiments.models import Dataset, Experiment, Run
from paddock.experiments.states import run_transition
from paddock.teams.models import ApiToken, Role
from paddock.teams.services import api_token_create
from paddock_client import __version__
from tests.platform.client.conftest import tiny_base

pytestmark = [pytest.mark.usefixtures("quiet_hooks"), pytest.mark.django_db(transaction=True)]
REPO_FIXTURES = "tests/platform/client/fixtures"


def test_version_and_help(cli):
    code, out, _ = cli("--version")
    assert code == 0 and out.strip() == f"paddock {__version__}"
    code, out, _ = cli("runs", "--help")
    assert code == 0 and "export" in out and "pause" in out
    code, _, err = cli("runs", "pause", "not-a-number")
    assert code == 2 and "run_id" in err and "integer" in err


def test_experiments_launch_list_get_clone_diff(cli, world, tmp_path):
    spec = tmp_path / "sweep.yaml"
    spec.write_text("train:\n  steps: 5\nrollout:\n  max_new_tokens: 4\n")
    code, out, _ = cli("experiments", "launch", spec, "--backends", "torch", "--seeds", "2",
                       "--tag", "cli")  # fmt: skip
    assert code == 0 and out.count("  run ") == 2, out
    first = Experiment.objects.get(name="sweep")
    listed = cli.json("experiments", "list", "--tag", "cli")
    assert [e["id"] for e in listed] == [first.pk]
    got = cli.json("experiments", "get", first.pk)
    assert got["name"] == "sweep" and got["run_count"] == 2
    code, out, _ = cli("experiments", "clone", first.pk, "--set", "train.steps=7",
                       "--name", "longer", "--seeds", "1")  # fmt: skip
    assert code == 0, out
    clone = Experiment.objects.get(name="longer")
    assert Run.objects.get(experiment=clone).total_steps == 7
    changes = cli.json("experiments", "diff", first.pk, clone.pk)
    assert {"path": "train.steps", "a": 5, "b": 7} in changes
    code, out, _ = cli("experiments", "diff", first.pk, clone.pk)
    assert code == 0 and "train.steps" in out
    code, _, err = cli("experiments", "launch", spec, "--set", "train.steps=0")
    assert code == 1 and "spec_invalid (spec.train.steps)" in err
    code, out, err = cli("experiments", "launch", spec, "--validate-only")
    assert code == 0 and "would start" in out
    assert Experiment.objects.count() == 2


def test_experiments_launch_with_a_preflight_then_override(cli, world, tmp_path):
    spec = tmp_path / "checked.yaml"
    spec.write_text("train:\n  steps: 5\nrollout:\n  max_new_tokens: 4\n")
    code, out, _ = cli("experiments", "launch", spec, "--backends", "torch", "--preflight")
    assert code == 0 and out.count("  run ") == 2, out  # the pre-flight run and the run
    experiment = Experiment.objects.get(name="checked")
    code, out, _ = cli("experiments", "preflight", experiment.pk)
    assert code == 1 and out.startswith("pre-flight: pending") and "torch (run " in out
    code, out, _ = cli("experiments", "preflight", experiment.pk, "--override")
    assert code == 0 and out.startswith("pre-flight: overridden")


def test_runs_get_control_metrics_export(cli, launched, tmp_path):
    run_id = launched[0]["runs"][0]["id"]
    run = Run.objects.get(pk=run_id)
    for state in ("dispatching", "starting", "running"):
        run_transition(run=run, to_state=state)
    points = [("reward/mean", s, 1e9 + s, s / 10) for s in range(1500)]
    points += [("kl", s, 1e9 + s, 0.0) for s in range(0, 1500, 3)]
    metric_points_store(run_id=run_id, points=points)
    got = cli.json("runs", "get", run_id)
    assert got["state"] == "running" and got["id"] == run_id
    code, out, _ = cli("runs", "get", run_id)
    assert code == 0 and "running" in out
    assert [r["id"] for r in cli.json("runs", "list", "--state", "running")] == [run_id]
    code, out, _ = cli("runs", "pause", run_id)
    assert code == 0 and "pausing (desired: paused)" in out
    code, out, _ = cli("runs", "metrics", run_id)
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["reward/mean"][1:3] == ["1500", "1499"] and rows["kl"][1] == "500"
    series = cli.json("runs", "metrics", run_id, "--keys", "reward/mean", "--max-points", "100")
    assert len(series["series"]) == 1 and len(series["series"][0]["y"]) <= 100
    # export: every point, not the downsampled series
    target = tmp_path / "run.csv"
    code, _, err = cli("runs", "export", run_id, "--format", "csv", "-o", target)
    assert code == 0, err
    exported = list(csv.DictReader(io.StringIO(target.read_text())))
    assert len(exported) == len(points)
    assert {(r["key"], int(r["step"])) for r in exported} == {(k, s) for k, s, _, _ in points}
    target = tmp_path / "run.parquet"
    code, _, err = cli("runs", "export", run_id, "--format", "parquet", "--keys", "kl",
                       "-o", target)  # fmt: skip
    assert code == 0, err
    table = pq.read_table(target)
    assert table.num_rows == 500 and set(table.column("key").to_pylist()) == {"kl"}
    code, _, err = cli("runs", "export", 999999, "-o", tmp_path / "none.csv")
    assert code == 1 and "404 not_found" in err and not (tmp_path / "none.csv").exists()
    code, out, _ = cli("runs", "logs", run_id)
    assert code == 0 and "running → pausing" in out
    assert all(json.loads(line)["id"] for line in cli("runs", "logs", run_id, "-o", "json")[1]
               .splitlines())  # fmt: skip


def test_runs_list_state_is_exact_and_active_is_every_unfinished_state(cli, world, tmp_path):
    spec = tmp_path / "five.yaml"
    spec.write_text("train:\n  steps: 5\n")
    code, out, _ = cli("experiments", "launch", spec, "--backends", "torch", "--seeds", "5")
    assert code == 0, out
    runs = list(Run.objects.order_by("pk"))
    paths = [[], ["dispatching"], ["dispatching", "starting"],
             ["dispatching", "running", "pausing"], ["aborted"]]  # fmt: skip
    for run, path in zip(runs, paths, strict=True):
        for state in path:
            run_transition(run=run, to_state=state)
    by_state = {(path or ["queued"])[-1]: run.pk for run, path in zip(runs, paths, strict=True)}
    exact = cli.json("runs", "list", "--state", "queued,running")
    assert [r["id"] for r in exact] == [by_state["queued"]]  # starting is not running
    active = cli.json("runs", "list", "--active")
    assert {r["state"] for r in active} == {"queued", "dispatching", "starting", "pausing"}
    assert by_state["aborted"] not in {r["id"] for r in active}
    code, _, err = cli("runs", "list", "--active", "--state", "running")
    assert code == 2 and "--active" in err
    code, out, _ = cli("runs", "list", "--help")
    assert code == 0 and "--active" in out and "not finished" in out


def test_checkpoints_download_an_adapter_peft_loads(cli, checkpointed, tmp_path):
    from peft import PeftModel

    run_id, latest, saved = checkpointed
    listed = cli.json("checkpoints", "list", run_id)
    assert sorted(c["step"] for c in listed) == [2, 4]
    code, out, _ = cli("checkpoints", "list", run_id)
    rows = [line.split() for line in out.splitlines() if line[:1].isdigit()]  # not a fold
    table = {row[1]: row for row in rows}  # by STEP: ID STEP ADAPTER BYTES CREATED URI
    assert code == 0 and table["4"][3] == str(latest.size_bytes) and latest.size_bytes > 0
    dest = tmp_path / "adapter"
    code, out, err = cli("checkpoints", "download", run_id, "-o", dest)
    assert code == 0, err
    assert "step 4 (adapter v3)" in out
    files = sorted(p.name for p in dest.iterdir())
    assert "adapter_config.json" in files and "adapter_model.safetensors" in files
    assert "optimizer.pt" not in files and "trainer_state.json" not in files
    assert load_file(str(dest / "adapter_model.safetensors")).keys() == saved.keys()
    model = PeftModel.from_pretrained(tiny_base(), str(dest))
    loaded = {n: p for n, p in model.named_parameters() if "lora_" in n}
    assert len(loaded) == len(saved)
    for name, tensor in saved.items():
        match = [p for n, p in loaded.items() if n.replace(".default", "").endswith(name
                 .removeprefix("base_model.model."))]  # fmt: skip
        assert len(match) == 1 and torch.equal(match[0].detach(), tensor), name
    # the whole checkpoint, as the server sends it
    code, _, err = cli("checkpoints", "download", run_id, latest.pk, "--full", "-o", tmp_path)
    assert code == 0, err
    with tarfile.open(tmp_path / f"run{run_id}-step4.tar") as tar:
        names = tar.getnames()
    assert f"run{run_id}-step4/optimizer.pt" in names
    code, _, err = cli("checkpoints", "download", run_id, 999999)
    assert code == 1 and "no checkpoint 999999" in err


def test_datasets_upload_and_list(cli, world, tmp_path):
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps({"q": f"{i}+1", "a": i + 1}) + "\n" for i in range(3000)))
    code, out, err = cli("datasets", "upload", data, "--team", "team-a", "--name", "math")
    assert code == 0, err
    dataset = Dataset.objects.get(name="math")
    assert out.startswith(f"dataset://{dataset.pk}") and dataset.rows == 3000
    assert dataset.size_bytes == data.stat().st_size
    assert [d["id"] for d in cli.json("datasets", "list")] == [dataset.pk]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"q": 1}\nnot json\n')
    code, _, err = cli("datasets", "upload", bad)
    assert code == 1 and "400 invalid (file): line 2" in err


def test_tokens_create_and_revoke(cli, world):
    code, out, err = cli("tokens", "create", "ci", "--team", "team-a")
    assert code == 0 and "shown once" in err
    secret = out.strip()
    me = requests.get(f"{cli.url}/api/v1/me", headers={"Authorization": f"Bearer {secret}"})
    assert me.status_code == 200
    token = ApiToken.objects.get(name="ci")
    assert token.pk in [t["id"] for t in cli.json("tokens", "list")]
    code, out, _ = cli("tokens", "revoke", token.pk)
    assert code == 0 and "revoked" in out
    me = requests.get(f"{cli.url}/api/v1/me", headers={"Authorization": f"Bearer {secret}"})
    assert me.status_code == 401


def test_secrets_set_list_delete(cli, world, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("tok-0123456789-abcdefghij\n"))
    code, out, _ = cli("secrets", "set", "judge", "--team", "team-a")  # the value from stdin
    assert code == 0 and "secret judge set (••••ghij)" in out
    listed = cli.json("secrets", "list", "--team", "team-a")
    assert [(s["name"], s["masked"]) for s in listed] == [("judge", "••••ghij")]
    assert "0123456789" not in json.dumps(listed)
    code, out, _ = cli("secrets", "delete", "judge", "--team", "team-a")
    assert code == 0 and cli.json("secrets", "list", "--team", "team-a") == []


def test_clusters_register_list_health(cli, world, monkeypatch, settings):
    from tests.conftest import free_port

    address = f"http://127.0.0.1:{free_port()}"
    # a team admin registers a cluster only inside a network the operator allowed
    # (tests/security/test_clusters.py holds the refusal outside it)
    settings.PADDOCK_CLUSTER_NETWORKS = ["127.0.0.0/8"]
    code, out, err = cli("clusters", "register", "a-gpus", address, "--backends", "torch",
                         "--capacity", '{"gpus": 2}', "-o", "json")  # fmt: skip
    assert code == 0, err
    cluster = json.loads(out)
    assert cluster["team"] == world.team_a.pk and cluster["capacity"] == {"gpus": 2}
    assert "a-gpus" in [c["name"] for c in cli.json("clusters", "list")]
    code, out, _ = cli("clusters", "health", cluster["id"])
    assert code == 1 and "healthy" in out and "False" in out
    code, _, err = cli("clusters", "register", "x", address, "--capacity", "[1]")
    assert code == 2 and "--capacity" in err
    _, secret = api_token_create(
        actor=world.actor(world.users_a[Role.MEMBER]), team=world.team_a, name="m"
    )
    monkeypatch.setenv("PADDOCK_TOKEN", secret)
    code, _, err = cli("clusters", "register", "mine", address)
    assert code == 1 and "403 permission_denied" in err


def test_spec_schema_validate_import(cli, tmp_path):
    code, out, _ = cli("spec", "schema")
    assert code == 0 and "train" in json.loads(out)["properties"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  steps: 0\n")
    code, _, err = cli("spec", "validate", bad)
    assert code == 1 and "train.steps" in err
    out_file = tmp_path / "from-verl.yaml"
    code, _, err = cli("spec", "import", "--from", "verl", f"{REPO_FIXTURES}/verl_grpo_lora.yaml",
                       "-o", out_file)  # fmt: skip
    assert code == 0 and "not mapped" in err
    code, out, _ = cli("spec", "validate", out_file)
    assert code == 0 and "valid" in out
    code, _, err = cli("spec", "import", "--from", "trl", f"{REPO_FIXTURES}/verl_grpo_lora.yaml")
    assert code == 2 and "trl" in err


def test_local_verbs_name_the_extra_they_miss(cli, monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    code, _, err = cli("train", tmp_path / "x.yaml")
    assert code == 2 and "pip install 'paddock[workers]'" in err
    code, _, err = cli("up")
    assert code == 2 and "pip install 'paddock[all]'" in err


def test_not_logged_in_says_how(cli, monkeypatch):
    monkeypatch.delenv("PADDOCK_URL")
    monkeypatch.delenv("PADDOCK_TOKEN")
    code, _, err = cli("runs", "list")
    assert code == 1 and "paddock login" in err
