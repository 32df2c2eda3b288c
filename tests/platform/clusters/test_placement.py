"""Placement checks as pure functions: what a run asks for, what a cluster can ever offer,
what it has free now, and the snapshots parsed from the dashboard's answers."""

from paddock.clusters.placement import (
    never_placeable,
    run_bundles,
    snapshot_from_cluster_status,
    snapshot_from_nodes,
    snapshot_less,
    wait_reason,
)
from workers.spec import ResourcesSpec

LOCAL = ResourcesSpec(executor="local", trainer_gpus=1, trainer_cpus=1)
RAY = ResourcesSpec(executor="ray", trainer_gpus=2, trainer_cpus=1, trainer_actors=2,
                    rollout_replicas=3, rollout_gpus=1, rollout_cpus=2)  # fmt: skip


def nodes(*shapes, free=None):
    free = free or shapes
    return {"nodes": [
        {"total": {"CPU": c, "GPU": g}, "free": {"CPU": fc, "GPU": fg}}
        for (c, g), (fc, fg) in zip(shapes, free, strict=True)
    ]}  # fmt: skip


def test_bundles_follow_the_executor():
    (driver,) = run_bundles(LOCAL)
    assert driver.amounts == {"CPU": 1.0, "GPU": 1.0}
    ray = run_bundles(RAY)
    assert [b.what for b in ray] == ["the job's driver"] + ["a trainer actor"] * 2 + [
        "a rollout replica"] * 3  # fmt: skip
    assert sum(b.amounts["GPU"] for b in ray) == 2 + 3  # spec_gpus of the same section
    assert [b.amounts["GPU"] for b in ray[1:3]] == [1.0, 1.0]  # split over the actors


def test_more_than_the_cluster_has_is_refused_naming_the_setting():
    refusal = never_placeable(bundles=run_bundles(LOCAL), cluster_name="local",
                              snapshot=nodes((2, 0)), capacity={})  # fmt: skip
    assert refusal.setting == "resources.trainer_gpus"
    assert refusal.message == (
        "resources.trainer_gpus: the cluster local has 0 GPUs (the run asks for 1 GPU)"
    )
    cpus = never_placeable(
        bundles=run_bundles(LOCAL.model_copy(update={"trainer_gpus": 0, "trainer_cpus": 4})),
        cluster_name="local",
        snapshot=nodes((2, 0), (1, 0)),
        capacity={},
    )
    assert cpus.setting == "resources.trainer_cpus" and "has 3 CPUs" in cpus.message
    # the Ray executor: the rollout replicas ask for most of the GPUs, so they are named
    short = never_placeable(bundles=run_bundles(RAY), cluster_name="c",
                            snapshot=nodes((16, 4)), capacity={})  # fmt: skip
    assert short.setting == "resources.rollout_gpus"
    assert "has 4 GPUs (the run asks for 5 GPUs)" in short.message


def test_a_bundle_must_fit_on_one_node():
    spec = LOCAL.model_copy(update={"trainer_gpus": 4})
    refusal = never_placeable(bundles=run_bundles(spec), cluster_name="c",
                              snapshot=nodes((8, 2), (8, 2)), capacity={})  # fmt: skip
    assert refusal.setting == "resources.trainer_gpus"
    assert "the job's driver needs 4 GPUs on one node" in refusal.message
    assert "largest node of the cluster c has 2 GPUs" in refusal.message
    # split over two actors, the same four GPUs fit
    split = RAY.model_copy(update={"trainer_gpus": 4, "rollout_gpus": 0})
    assert never_placeable(bundles=run_bundles(split), cluster_name="c",
                           snapshot=nodes((8, 2), (8, 2)), capacity={}) is None  # fmt: skip


def test_declared_capacity_replaces_the_observed_totals():
    bundles = run_bundles(LOCAL)
    grows = never_placeable(bundles=bundles, cluster_name="c", snapshot=nodes((2, 0)),
                            capacity={"gpus": 8})  # fmt: skip
    assert grows is None  # an autoscaling cluster: the operator says it can have 8
    capped = never_placeable(
        bundles=run_bundles(LOCAL.model_copy(update={"trainer_gpus": 9})),
        cluster_name="c",
        snapshot={},
        capacity={"gpus": 8},
    )
    assert capped.message.startswith("resources.trainer_gpus: the cluster c has at most 8 GPUs")


def test_nothing_known_refuses_nothing():
    bundles = run_bundles(LOCAL.model_copy(update={"trainer_gpus": 64}))
    assert never_placeable(bundles=bundles, cluster_name="c", snapshot={}, capacity={}) is None
    assert wait_reason(bundles=bundles, cluster_name="c", snapshot={}) is None
    totals_only = {"nodes": [{"total": {"CPU": 2, "GPU": 0}}]}
    assert wait_reason(bundles=bundles, cluster_name="c", snapshot=totals_only) is None


def test_what_is_short_now_is_a_reason_to_wait():
    bundles = run_bundles(LOCAL)
    busy = nodes((4, 1), free=[(4, 0)])
    assert wait_reason(bundles=bundles, cluster_name="local", snapshot=busy) == (
        "waiting for 1 GPU; the cluster local has 0 free"
    )
    assert wait_reason(bundles=bundles, cluster_name="local", snapshot=nodes((4, 1))) is None
    # enough in all, but split over nodes so that no node can take the driver
    spread = nodes((2, 1), (2, 1), free=[(1, 0), (0, 1)])
    reason = wait_reason(bundles=bundles, cluster_name="local", snapshot=spread)
    assert reason.startswith("waiting for a node with 1 GPU and 1 CPU free for the job's driver")


def test_snapshots_from_the_dashboards_answers():
    status = {"clusterStatus": {"loadMetricsReport": {
        "usage": {"CPU": [1.0, 6.0], "GPU": [1.0, 2.0]},
        "usageByNode": {"a": {"CPU": [1.0, 2.0], "GPU": [1.0, 2.0], "memory": [0, 9]},
                        "b": {"CPU": [0.0, 4.0]}},
    }}}  # fmt: skip
    snap = snapshot_from_cluster_status(status)
    assert snap["nodes"] == [
        {"total": {"GPU": 2.0, "CPU": 2.0}, "free": {"GPU": 1.0, "CPU": 1.0}},
        {"total": {"GPU": 0.0, "CPU": 4.0}, "free": {"GPU": 0.0, "CPU": 4.0}},
    ]
    assert snapshot_from_cluster_status({"clusterStatus": None}) is None
    listed = {"result": {"result": [
        {"state": "ALIVE", "resources_total": {"CPU": 8.0, "GPU": 1.0}},
        {"state": "DEAD", "resources_total": {"CPU": 8.0}},
    ]}}  # fmt: skip
    assert snapshot_from_nodes(listed)["nodes"] == [{"total": {"GPU": 1.0, "CPU": 8.0}}]


def test_runs_dispatched_since_the_report_are_taken_from_what_is_free():
    bundles = run_bundles(LOCAL.model_copy(update={"trainer_gpus": 0, "trainer_cpus": 2}))
    snapshot = nodes((4, 0), (2, 0))
    less = snapshot_less(snapshot, bundles)  # first fit: the first node
    assert [n["free"]["CPU"] for n in less["nodes"]] == [2.0, 2.0]
    assert [n["total"]["CPU"] for n in less["nodes"]] == [4.0, 2.0]
    assert snapshot["nodes"][0]["free"]["CPU"] == 4  # the stored snapshot is left alone
    three = snapshot_less(snapshot, bundles * 3)
    assert wait_reason(bundles=bundles, cluster_name="c", snapshot=three) == (
        "waiting for 2 CPUs; the cluster c has 0 free"
    )
