"""Launch, validate_only, backends against clusters, config versions, clone, diff."""

import pytest

from paddock.clusters.dispatch import _candidates
from paddock.clusters.models import RayCluster
from paddock.core.errors import DomainError
from paddock.experiments import hooks
from paddock.experiments.configs import spec_hash
from paddock.experiments.models import ConfigVersion, Experiment, Run
from paddock.teams.models import Role
from tests.platform.conftest import launch

pytestmark = pytest.mark.usefixtures("quiet_hooks")


@pytest.fixture
def member(world, client_as):
    return client_as(world.users_a[Role.MEMBER])


def test_a_launch_makes_a_run_per_backend_and_seed_each_with_its_own_config(
    world, member, django_capture_on_commit_callbacks, monkeypatch
):
    enqueued = []
    monkeypatch.setattr(hooks, "run_enqueued", enqueued.append)
    with django_capture_on_commit_callbacks(execute=True):
        spec = {"seed": 7, "rollout": {"temperature": 0.9}}
        reply = launch(
            member, world.team_a, backends=["torch", "vllm"], seeds=2, tags=["baseline"], spec=spec
        )
    assert reply.status_code == 201, reply.json()
    body = reply.json()
    runs = body["runs"]
    assert [(r["backend"], r["seed"]) for r in runs] == [
        ("torch", 7), ("torch", 8), ("vllm", 7), ("vllm", 8)]  # fmt: skip
    assert {r["state"] for r in runs} == {"queued"}
    assert {r["desired_state"] for r in runs} == {"running"}
    assert sorted(enqueued) == sorted(r["id"] for r in runs)
    launched = ConfigVersion.objects.get(pk=body["experiment"]["config"])
    assert launched.hash == spec_hash(launched.spec)
    for r in runs:
        config = ConfigVersion.objects.get(pk=r["config"])
        assert config.parent_id == launched.pk
        assert config.spec["rollout"]["backend"] == r["backend"]
        assert config.spec["seed"] == r["seed"]
        assert config.spec["rollout"]["temperature"] == 0.9
        assert config.spec["train"]["steps"] == 50  # defaults are stored: what ran is stored
    assert body["experiment"]["tags"] == ["baseline"]


def test_validate_only_reports_every_error_and_creates_nothing(world, member):
    reply = launch(member, world.team_a, validate_only=True,
                   spec={"algorithm": {"clip_eps_high": 0, "bogus": 1}})  # fmt: skip
    assert reply.status_code == 200
    body = reply.json()
    assert body["valid"] is False
    fields = {e["field"] for e in body["errors"]}
    assert {"spec.algorithm.clip_eps_high", "spec.algorithm.bogus"} <= fields
    assert not Experiment.objects.exists() and not ConfigVersion.objects.exists()
    ok = launch(member, world.team_a, validate_only=True, backends=["torch", "vllm"]).json()
    assert ok["valid"] is True and len(ok["runs"]) == 2
    assert not Experiment.objects.exists()


def test_an_invalid_spec_is_a_400_naming_the_field(world, member):
    reply = launch(member, world.team_a, spec={"rollout": {"top_p": 0.9}})
    assert reply.status_code == 400
    body = reply.json()
    assert (body["code"], body["field"]) == ("spec_invalid", "spec.rollout.top_p")
    assert "untruncated" in body["message"]


def test_backends_must_be_advertised_by_the_cluster(world, member):
    reply = launch(member, world.team_a, backends=["trtllm"])
    assert reply.status_code == 400
    assert (reply.json()["code"], reply.json()["field"]) == ("backend_unavailable", "backends")
    torch_only = RayCluster.objects.create(name="cpu", address="http://x", backends=["torch"])
    reply = launch(member, world.team_a, backends=["vllm"], cluster=torch_only.pk)
    assert reply.json()["code"] == "backend_unavailable"
    assert "cpu" in reply.json()["message"]
    reply = launch(member, world.team_a, backends=["torch"], cluster=torch_only.pk)
    assert reply.status_code == 201
    assert reply.json()["runs"][0]["cluster"] == torch_only.pk


def test_an_environment_must_be_offered_by_a_cluster(world, member):
    def spec(name: str) -> dict:
        return {"env": {"name": name}, "data": {"task": "environment"},
                "reward": {"functions": [{"name": "env"}]}}  # fmt: skip

    reply = launch(member, world.team_a, spec=spec("wordle"))
    assert reply.status_code == 400
    body = reply.json()
    assert (body["code"], body["field"]) == ("environment_unavailable", "spec.env.name")
    assert "calculator" in body["message"]  # what is offered: the built-ins at least
    assert launch(member, world.team_a, spec=spec("calculator")).status_code == 201
    games = RayCluster.objects.create(
        name="games", address="http://x", backends=["torch"], environments=["wordle"]
    )
    reply = launch(member, world.team_a, spec=spec("wordle"))
    assert reply.status_code == 201
    run = Run.objects.get(pk=reply.json()["runs"][0]["id"])
    assert _candidates(run) == [games]  # dispatch sends it only where the game is


def test_another_teams_cluster_is_not_a_target(world, member):
    private = RayCluster.objects.create(
        name="b-only", address="http://x", backends=["torch"], team=world.team_b
    )
    reply = launch(member, world.team_a, cluster=private.pk)
    assert (reply.status_code, reply.json()["field"]) == (400, "cluster")


def test_without_clusters_a_launch_says_so(world, member):
    RayCluster.objects.all().delete()
    reply = launch(member, world.team_a)
    assert reply.json()["code"] == "no_cluster"


def test_backend_specific_keys_stay_with_their_backend(world, member):
    spec = {"rollout": {"backend": "vllm", "gpu_memory_utilization": 0.3, "temperature": 0.5}}
    runs = launch(member, world.team_a, spec=spec, backends=["vllm", "torch"]).json()["runs"]
    specs = {r["backend"]: ConfigVersion.objects.get(pk=r["config"]).spec for r in runs}
    assert specs["vllm"]["rollout"]["gpu_memory_utilization"] == 0.3
    assert "gpu_memory_utilization" not in specs["torch"]["rollout"]
    assert specs["torch"]["rollout"]["temperature"] == 0.5


def test_config_versions_are_immutable(world, launched):
    config = ConfigVersion.objects.first()
    config.spec = {"seed": 99}
    with pytest.raises(DomainError) as err:
        config.save()
    assert err.value.code == "config_immutable"


def test_clone_with_edits_then_diff_shows_only_the_edits(world, member, launched):
    source = launched[0]["experiment"]
    reply = member.post(
        f"/api/v1/experiments/{source['id']}/clone",
        {"edits": {"algorithm.kl_coef": 0.05, "train.lr": 0.0003}, "name": "kl"},
        format="json",
    )
    assert reply.status_code == 201, reply.json()
    clone = reply.json()
    assert [r["backend"] for r in clone["runs"]] == ["torch", "vllm"]  # as the source
    assert clone["experiment"]["cloned_from"] == source["id"]
    new_config = ConfigVersion.objects.get(pk=clone["experiment"]["config"])
    assert new_config.parent_id == source["config"]
    diff = member.get("/api/v1/configs/diff", {"a": source["config"], "b": new_config.pk}).json()
    assert diff["changes"] == [
        {"path": "algorithm.kl_coef", "a": 0.0, "b": 0.05},
        {"path": "train.lr", "a": 0.0001, "b": 0.0003},
    ]
    runs = clone["runs"]
    between_backends = member.get(
        "/api/v1/configs/diff", {"a": runs[0]["config"], "b": runs[1]["config"]}
    ).json()["changes"]
    paths = {c["path"]: c for c in between_backends}
    assert paths["rollout.backend"] == {"path": "rollout.backend", "a": "torch", "b": "vllm"}
    assert paths["rollout.max_batch_size"]["only_in"] == "a"


def test_a_clone_with_a_bad_edit_names_it(world, member, launched):
    source = launched[0]["experiment"]["id"]
    reply = member.post(f"/api/v1/experiments/{source}/clone",
                        {"edits": {"train.steps": -1}}, format="json")  # fmt: skip
    assert (reply.status_code, reply.json()["field"]) == (400, "spec.train.steps")
    reply = member.post(f"/api/v1/experiments/{source}/clone",
                        {"edits": {"train.steps.x": 1}}, format="json")  # fmt: skip
    assert (reply.status_code, reply.json()["field"]) == (400, "edits")


def test_runs_filter_by_state_backend_tag_and_creator(world, member, client_as, launched):
    launch(member, world.team_a, backends=["vllm"], tags=["sweep"])
    run = Run.objects.filter(team=world.team_a, backend="torch").first()
    Run.objects.filter(pk=run.pk).update(state="running")

    def ids(**params):
        return [r["id"] for r in member.get("/api/v1/runs", params).json()["results"]]

    assert ids(state="running") == [run.pk]
    assert len(ids(state="queued,running")) == 3
    assert len(ids(backend="vllm")) == 2
    assert len(ids(tag="sweep")) == 1
    assert len(ids(creator="a-member")) == 3 and ids(creator="a-owner") == []
    bad = member.get("/api/v1/runs", {"state": "sleeping"})
    assert (bad.status_code, bad.json()["field"]) == (400, "state")


def test_lists_paginate_with_cursors(world, member):
    for _ in range(3):
        launch(member, world.team_a)
    first = member.get("/api/v1/runs", {"limit": 2}).json()
    assert len(first["results"]) == 2 and first["next"]
    second = member.get(first["next"]).json()
    assert len(second["results"]) == 1 and second["next"] is None
    seen = [r["id"] for r in first["results"] + second["results"]]
    assert seen == sorted(seen, reverse=True)
