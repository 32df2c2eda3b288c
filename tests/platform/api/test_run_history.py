"""What the browser app reads beside the live stream: the last metric values on runs, the
sample history, older log lines, zoomed and experiment-wide metrics, and the snapshot's
samples and log ids."""

from __future__ import annotations

import pytest
from django.utils import timezone

from paddock.experiments.metrics import LATEST_KEYS, metric_points_store
from paddock.experiments.models import Run, RunEvent, SampleSet
from paddock.live.snapshots import SNAPSHOT_SAMPLES, run_snapshot
from paddock.teams.models import Role

V = Role.VIEWER


@pytest.fixture
def runs(launched) -> tuple[Run, Run, Run]:
    """Team A's two runs and team B's one."""
    a, b = launched
    return (Run.objects.get(pk=a["runs"][0]["id"]), Run.objects.get(pk=a["runs"][1]["id"]),
            Run.objects.get(pk=b["runs"][0]["id"]))  # fmt: skip


# --- latest ------------------------------------------------------------------------------


def test_runs_carry_the_value_at_the_highest_stored_step(world, client_as, runs):
    run, other, _ = runs
    metric_points_store(run_id=run.pk, points=[("reward/mean", 5, 1.0, 0.5), ("kl", 2, 1.0, 0.1),
                                               ("loss/policy", 9, 1.0, 3.0)])  # fmt: skip
    # a later batch re-emits an earlier step (a resume): the highest step still wins
    metric_points_store(run_id=run.pk, points=[("reward/mean", 3, 2.0, 0.9), ("kl", 4, 2.0, 0.2)])
    client = client_as(world.users_a[V])
    listed = {r["id"]: r for r in client.get("/api/v1/runs").json()["results"]}
    assert listed[run.pk]["latest"] == {"reward/mean": 0.5, "kl": 0.2}
    assert listed[other.pk]["latest"] == {}  # nothing stored: no keys, not nulls
    one = client.get(f"/api/v1/runs/{run.pk}").json()
    assert one["latest"] == {"reward/mean": 0.5, "kl": 0.2}
    assert set(LATEST_KEYS) >= set(one["latest"])  # loss/policy is not one of them


def test_every_latest_key_comes_back(world, client_as, runs):
    run = runs[0]
    metric_points_store(
        run_id=run.pk, points=[(k, 1, 1.0, i / 10) for i, k in enumerate(LATEST_KEYS)]
    )
    body = client_as(world.users_a[V]).get(f"/api/v1/runs/{run.pk}").json()
    assert body["latest"] == {k: i / 10 for i, k in enumerate(LATEST_KEYS)}


def test_control_replies_carry_latest_too(world, client_as, runs, quiet_hooks):
    run = runs[0]
    metric_points_store(run_id=run.pk, points=[("accuracy", 1, 1.0, 0.75)])
    reply = client_as(world.users_a[Role.MEMBER]).post(f"/api/v1/runs/{run.pk}/abort")
    assert reply.status_code == 200 and reply.json()["latest"] == {"accuracy": 0.75}


# --- samples ---------------------------------------------------------------------------


def _sample_sets(run, steps):
    for step in steps:
        SampleSet.objects.create(run=run, step=step, dispatch=1,
                                 items=[{"prompt": f"p{step}", "completion": "c", "reward": 1.0,
                                         "advantage": 0.5, "adapter_version": step}])  # fmt: skip


def test_samples_come_newest_first_one_set_per_step(world, client_as, runs):
    run = runs[0]
    _sample_sets(run, [1, 2, 3, 4, 5])
    SampleSet.objects.create(run=run, step=3, dispatch=2, items=[{"prompt": "again"}])  # resumed
    client = client_as(world.users_a[V])
    url = f"/api/v1/runs/{run.pk}/samples"
    page = client.get(url, {"limit": 2}).json()
    assert [s["step"] for s in page["results"]] == [5, 4]
    assert page["next_before_step"] == 4
    assert set(page["results"][0]) == {"id", "step", "dispatch", "items", "created_at"}
    older = client.get(url, {"limit": 2, "before_step": 4}).json()
    assert [(s["step"], s["dispatch"]) for s in older["results"]] == [(3, 2), (2, 1)]
    assert older["results"][0]["items"] == [{"prompt": "again"}]
    last = client.get(url, {"limit": 2, "before_step": 2}).json()
    assert [s["step"] for s in last["results"]] == [1] and last["next_before_step"] is None
    one = client.get(url, {"step": 4}).json()["results"]
    assert [s["items"][0]["prompt"] for s in one] == ["p4"]
    assert client.get(url, {"step": 99}).json() == {"results": [], "next_before_step": None}
    bad = client.get(url, {"limit": 0})
    assert (bad.status_code, bad.json()["field"]) == (400, "limit")


def test_another_teams_samples_are_not_found(world, client_as, runs):
    _sample_sets(runs[0], [1])
    reply = client_as(world.users_b[Role.OWNER]).get(f"/api/v1/runs/{runs[0].pk}/samples")
    assert (reply.status_code, reply.json()["code"]) == (404, "not_found")


# --- events before -----------------------------------------------------------------------


def test_older_events_come_newest_first_before_an_id(world, client_as, runs):
    run = runs[0]
    events = [run.events.create(kind="log" if i % 3 else "status", message=f"line {i}",
                                time=timezone.now()) for i in range(10)]  # fmt: skip
    ids = [e.id for e in events]
    client = client_as(world.users_a[V])
    url = f"/api/v1/runs/{run.pk}/events"
    page = client.get(url, {"before": ids[8], "limit": 3}).json()
    assert [e["id"] for e in page["results"]] == [ids[7], ids[6], ids[5]]
    assert page["next_before"] == ids[5] and page["last_id"] == ids[7]
    rest = client.get(url, {"before": ids[5], "limit": 10}).json()
    assert [e["id"] for e in rest["results"]] == ids[4::-1] and rest["next_before"] is None
    logs = client.get(url, {"before": ids[9] + 1, "kind": "log", "limit": 2}).json()
    assert [e["message"] for e in logs["results"]] == ["line 8", "line 7"]
    window = client.get(url, {"after": ids[2], "before": ids[5]}).json()
    assert [e["id"] for e in window["results"]] == [ids[4], ids[3]]
    forward = client.get(url, {"after": ids[7]}).json()  # unchanged: oldest first
    assert [e["id"] for e in forward["results"]] == ids[8:]
    assert forward["last_id"] == ids[9] and forward["next_before"] is None
    bad = client.get(url, {"before": 0})
    assert (bad.status_code, bad.json()["field"]) == (400, "before")


def test_another_teams_events_are_not_found(world, client_as, runs):
    reply = client_as(world.users_b[Role.OWNER]).get(f"/api/v1/runs/{runs[0].pk}/events?before=5")
    assert (reply.status_code, reply.json()["code"]) == (404, "not_found")


# --- metrics: zoom, experiment ---------------------------------------------------------


def _ramp(run, n=100, spike_at=None):
    points = [("reward/mean", s, 1000.0 + s, s / n) for s in range(n)]
    if spike_at is not None:
        points[spike_at] = ("reward/mean", spike_at, 1000.0 + spike_at, 50.0)
    metric_points_store(run_id=run.pk, points=points)


def test_a_zoom_refetches_finer_buckets_in_its_window(world, client_as, runs):
    run = runs[0]
    _ramp(run, 1000, spike_at=555)
    client = client_as(world.users_a[V])
    url = f"/api/v1/runs/{run.pk}/metrics"
    wide = client.get(url, {"keys": "reward/mean", "max_points": 10}).json()["series"][0]
    assert wide["count"] == 1000 and len(wide["x"]) <= 10 and 50.0 in wide["y"]
    zoom = client.get(url, {"keys": "reward/mean", "max_points": 100, "x_min": 550.5,
                            "x_max": 560}).json()["series"][0]  # fmt: skip
    assert zoom["step"] == list(range(551, 561)) and zoom["count"] == 10
    assert not zoom["downsampled"] and 50.0 in zoom["y"]
    by_time = client.get(url, {"keys": "reward/mean", "x": "time", "x_min": 1990}).json()
    assert by_time["series"][0]["step"] == list(range(990, 1000))
    bad = client.get(url, {"x_min": 5, "x_max": 1})
    assert (bad.status_code, bad.json()["field"]) == (400, "x_max")
    far = client.get(url, {"keys": "reward/mean", "x_min": -1e300, "x_max": 1e300}).json()
    assert far["series"][0]["count"] == 1000


def test_every_run_of_an_experiment_in_one_statement_per_key(
    world, client_as, runs, launched, django_assert_max_num_queries
):
    run, other, _ = runs
    _ramp(run, 300, spike_at=123)
    _ramp(other, 50)
    metric_points_store(run_id=other.pk, points=[("kl", 1, 1.0, 0.1)])
    client = client_as(world.users_a[V])
    experiment = launched[0]["experiment"]["id"]
    params = {"experiment": experiment, "keys": "reward/mean,kl", "max_points": 20,
              "x_min": 10}  # fmt: skip
    # session (2), memberships (1), the experiment (1), its runs (1), a statement per key (2)
    with django_assert_max_num_queries(7):
        body = client.get("/api/v1/metrics", params).json()
    assert [r["run"] for r in body["runs"]] == [run.pk, other.pk]
    first, second = ({s["key"]: s for s in r["series"]} for r in body["runs"])
    assert first["reward/mean"]["count"] == 290 and len(first["reward/mean"]["x"]) <= 20
    assert 50.0 in first["reward/mean"]["y"] and min(first["reward/mean"]["x"]) >= 10
    assert second["reward/mean"]["count"] == 40 and first["kl"]["count"] == 0
    assert second["kl"]["count"] == 0  # step 1 < x_min
    del params["experiment"]
    same = client.get("/api/v1/metrics", {**params, "runs": f"{run.pk},{other.pk}"}).json()
    assert same == body


def test_a_stride_read_picks_evenly_spaced_steps_of_every_run(world, client_as, runs, launched):
    run, other, _ = runs
    _ramp(run, 1000)
    _ramp(other, 7)  # shorter than max_points: comes back whole
    metric_points_store(run_id=run.pk, points=[("tokens/total", s, 0.0, s * 10.0) for s in
                                               range(0, 1000, 2)])  # fmt: skip
    client = client_as(world.users_a[V])
    experiment = launched[0]["experiment"]["id"]
    params = {"experiment": experiment, "keys": "reward/mean", "max_points": 11,
              "sample": "stride"}  # fmt: skip
    body = client.get("/api/v1/metrics", params).json()
    first, second = (r["series"][0] for r in body["runs"])
    assert first["step"] == [999 * g // 10 for g in range(11)]  # 0, 99, 199, …, 999
    assert first["y"] == [s / 1000 for s in first["step"]] and first["count"] is None
    assert second["step"] == list(range(7)) and second["x"] == [float(s) for s in range(7)]
    by_time = client.get("/api/v1/metrics", {**params, "x": "time"}).json()["runs"][0]
    assert by_time["series"][0]["x"] == [1000.0 + s for s in first["step"]]
    # x=tokens: the first step at or after each target, kept only where tokens were reported
    tokens = client.get("/api/v1/metrics", {**params, "x": "tokens"}).json()["runs"][0]
    assert tokens["series"][0]["x"] == [s * 10.0 for s in first["step"] if s % 2 == 0]
    zoom = client.get(f"/api/v1/runs/{run.pk}/metrics", {**params, "x_min": 500, "x_max": 509.5})
    assert zoom.json()["series"][0]["step"] == list(range(500, 510))
    bad = client.get("/api/v1/metrics", {**params, "x": "time", "x_min": 1})
    assert (bad.status_code, bad.json()["field"]) == (400, "sample")


def test_the_stride_read_picks_the_same_points_without_postgresql(runs):
    from paddock.experiments.metrics import Window
    from paddock.experiments.metrics_stride import _rows_postgresql, _rows_python

    run, other, _ = runs
    metric_points_store(run_id=run.pk, points=[("kl", s, 1.0, s) for s in range(0, 3000, 7)])
    _ramp(other, 40)
    for key, window in (("kl", Window()), ("kl", Window(100.5, 2000)), ("reward/mean", Window())):
        ids = [run.pk, other.pk]
        assert _rows_python(ids, key, "step", 50, window) == _rows_postgresql(
            ids, key, "step", 50, window
        )


def test_by_time_each_runs_range_is_computed_once_before_analyze(runs):
    """A live run's new points are unknown to the planner's statistics. The x=time read
    must still find each run's range in one pass, not once per point (a nested loop that
    re-ran the aggregate made 6,000 points take 9 s)."""
    import json

    from django.db import connection

    from paddock.experiments.metrics import _BY_X, _x_sql
    from paddock.experiments.models import MetricPoint

    run = runs[0]
    _ramp(run, 300)
    x_col, join = _x_sql("time")
    sql = _BY_X.format(table=MetricPoint._meta.db_table, window="", x=x_col, join=join)
    params = {"runs": [run.pk], "key": "reward/mean", "tokens_key": "tokens/total",
              "max_points": 20, "buckets": 10}  # fmt: skip
    with connection.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        plan = cur.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan

    def aggregates(node):
        if node["Node Type"] == "Aggregate":
            yield node
        for child in node.get("Plans", []):
            yield from aggregates(child)

    loops = [n["Actual Loops"] for n in aggregates(plan[0]["Plan"])]
    assert loops and max(loops) == 1, loops


def test_metrics_of_an_experiment_need_exactly_one_source(world, client_as, runs, launched):
    client = client_as(world.users_a[V])
    neither = client.get("/api/v1/metrics", {"keys": "kl"})
    assert (neither.status_code, neither.json()["field"]) == (400, "runs")
    experiment = launched[0]["experiment"]["id"]
    both = client.get(
        "/api/v1/metrics", {"keys": "kl", "runs": runs[0].pk, "experiment": experiment}
    )
    assert (both.status_code, both.json()["field"]) == (400, "runs")


def test_another_teams_experiment_metrics_are_not_found(world, client_as, launched):
    theirs = launched[1]["experiment"]["id"]
    client = client_as(world.users_a[Role.OWNER])
    reply = client.get("/api/v1/metrics", {"experiment": theirs, "keys": "kl"})
    assert (reply.status_code, reply.json()["code"]) == (404, "not_found")


# --- the websocket snapshot ----------------------------------------------------------------


def test_the_snapshot_holds_the_last_sample_sets_and_log_ids(runs):
    run = runs[0]
    _sample_sets(run, range(1, SNAPSHOT_SAMPLES + 3))
    event = RunEvent.objects.create(run=run, kind="log", message="hi", time=timezone.now())
    snapshot = run_snapshot(run.pk)
    steps = list(range(3, SNAPSHOT_SAMPLES + 3))
    assert [s["step"] for s in snapshot["samples"]] == steps  # oldest first, like logs
    assert snapshot["samples"][-1]["items"][0]["prompt"] == f"p{steps[-1]}"
    assert snapshot["logs"][-1]["id"] == event.id
    assert snapshot["logs"][-1]["message"] == "hi"
