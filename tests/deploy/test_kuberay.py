"""deploy/kuberay/: the RayCluster that Paddock dispatches GPU runs to."""

from __future__ import annotations

import pytest

from .conftest import CHART, DEPLOY, load_yaml, ray_pin

MANIFESTS = sorted((DEPLOY / "kuberay").glob("*.yaml"))


@pytest.fixture(scope="module", params=MANIFESTS, ids=lambda p: p.name)
def cluster(request) -> dict:
    return load_yaml(request.param)


def _pods(cluster):
    yield "head", cluster["spec"]["headGroupSpec"]
    for group in cluster["spec"]["workerGroupSpecs"]:
        yield group["groupName"], group


def test_a_raycluster_of_the_platforms_ray(cluster):
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["kind"] == "RayCluster"
    assert cluster["spec"]["rayVersion"] == ray_pin()
    assert cluster["spec"]["authOptions"]["mode"] == "token"
    values = load_yaml(CHART / "values.yaml")
    assert cluster["spec"]["authOptions"]["secretName"] == values["ray"]["auth"]["secretName"]
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"


def test_the_charts_default_cluster_is_the_gpu_one():
    values = load_yaml(CHART / "values.yaml")
    gpu = load_yaml(DEPLOY / "kuberay" / "raycluster-gpu.yaml")
    # KubeRay's head service is <name>-head-svc
    assert f"//{gpu['metadata']['name']}-head-svc." in values["ray"]["address"]


def test_each_cluster_runs_one_image(cluster):
    images = {c["image"] for _, group in _pods(cluster)
              for c in group["template"]["spec"]["containers"]}  # fmt: skip
    assert len(images) == 1, images


def test_gpu_worker_groups_ask_kubernetes_for_what_they_tell_ray(cluster):
    groups = cluster["spec"]["workerGroupSpecs"]
    assert groups
    for group in groups:
        (container,) = group["template"]["spec"]["containers"]
        gpus = container["resources"]["limits"]["nvidia.com/gpu"]
        assert group["rayStartParams"]["num-gpus"] == gpus, group["groupName"]
        assert int(gpus) >= 1
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]


def test_every_pod_mounts_the_artifact_store_and_runs_as_non_root(cluster):
    values = load_yaml(CHART / "values.yaml")
    claim = "paddock-artifacts"  # the chart's claim for the release "paddock"
    for name, group in _pods(cluster):
        spec = group["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        volumes = {v["name"]: v for v in spec["volumes"]}
        (container,) = spec["containers"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volume = volumes[mounts[values["artifacts"]["mountPath"]]]
        assert volume["persistentVolumeClaim"]["claimName"] == claim, name
        assert ":" in container["image"] and not container["image"].endswith(":latest")
