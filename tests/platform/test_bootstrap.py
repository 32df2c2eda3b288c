"""paddock_bootstrap: admin, demo team and the local Ray head, idempotently."""

import pytest
from django.core.management import call_command

from paddock.clusters.models import RayCluster
from paddock.teams.models import Membership, Role, Team


@pytest.mark.django_db
def test_bootstrap_twice_gives_one_of_each(settings, tmp_path, monkeypatch):
    settings.PADDOCK_HOME = tmp_path
    settings.RAY_ADDRESS = "http://127.0.0.1:8265"
    monkeypatch.setenv("PADDOCK_ADMIN_PASSWORD", "secret-pw")
    call_command("paddock_bootstrap")
    cluster = RayCluster.objects.get(name="local")
    cluster.backends = ["torch", "vllm"]  # an operator adds a backend
    cluster.save()
    settings.RAY_ADDRESS = "http://127.0.0.1:9999"
    call_command("paddock_bootstrap")
    team = Team.objects.get(slug="demo")
    assert Membership.objects.get(team=team).role == Role.OWNER
    assert Membership.objects.get(team=team).user.username == "admin"
    cluster = RayCluster.objects.get()
    assert (cluster.team, cluster.address) == (None, "http://127.0.0.1:9999")
    assert cluster.backends == ["torch", "vllm"]
    assert (tmp_path / "admin-credentials").read_text() == "admin / secret-pw\n"


@pytest.mark.django_db
def test_without_a_ray_address_no_cluster_is_registered(settings, tmp_path):
    settings.PADDOCK_HOME = tmp_path
    settings.RAY_ADDRESS = ""
    call_command("paddock_bootstrap", "--no-demo")
    assert not RayCluster.objects.exists() and not Team.objects.exists()


@pytest.mark.django_db
def test_an_embedded_head_advertises_the_engines_installed_here_and_the_demo_uses_them(
    settings, tmp_path, monkeypatch
):
    from paddock.experiments.models import Experiment
    from paddock.ops.bootstrap import DEMOS
    from paddock.ops.doctor import available_backends, engine_versions

    settings.PADDOCK_HOME = tmp_path
    settings.RAY_ADDRESS = "http://127.0.0.1:8265"
    monkeypatch.setenv("PADDOCK_ADMIN_PASSWORD", "secret-pw")
    call_command("paddock_bootstrap", "--embedded-ray")
    here = available_backends(engine_versions())
    cluster = RayCluster.objects.get(name="local")
    assert set(cluster.backends) == {"torch", *here}
    demos = Experiment.objects.filter(team__slug="demo")
    assert sorted(e.name for e in demos) == sorted(name for _, name, _ in DEMOS)
    expected = {"torch", "vllm"} & set(cluster.backends)
    for demo in demos:
        assert {r.backend for r in demo.runs.all()} == expected
    call_command("paddock_bootstrap", "--embedded-ray")  # a restart launches nothing more
    assert Experiment.objects.filter(team__slug="demo").count() == len(DEMOS)


@pytest.mark.django_db
def test_a_demo_without_vllm_runs_on_torch_alone_and_says_why():
    from paddock.ops.bootstrap import demo_backends

    cluster = RayCluster(name="x", address="http://127.0.0.1:1", backends=["torch"])
    backends, why = demo_backends(cluster)
    assert backends == ["torch"] and "vLLM" in why and "make vllm" in why
    cluster.backends = ["torch", "vllm", "trtllm"]
    assert demo_backends(cluster) == (["torch", "vllm"], None)
