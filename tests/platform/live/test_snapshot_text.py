"""The snapshot a websocket sends, with its points written by PostgreSQL
(`run_snapshot_text`), is byte for byte json.dumps of the snapshot built in Python, for
values of every magnitude and shape; where PostgreSQL would write one differently (1e15 to
1e16), the snapshot is encoded in Python, still the same bytes."""

from __future__ import annotations

import json
import math

import pytest
from django.utils import timezone

from paddock.experiments.metrics import metric_points_store
from paddock.experiments.models import Run, RunEvent, SampleSet
from paddock.live.snapshots import recent_points_json, run_snapshot, run_snapshot_text

AWKWARD = [0.0, -0.0, 3.0, -2.5, 0.1 + 0.2, 1 / 3, math.pi, 1e-7, 1e-4, 9.5e-5, 123456789.125,
           9.99e14, 1e14 + 0.5, 1e16, 1e20, -1e300, 5e-324, 1.7976931348623157e308,
           2.0**49, float("nan"), float("inf"), float("-inf")]  # fmt: skip


@pytest.fixture
def run(launched) -> Run:
    return Run.objects.get(pk=launched[0]["runs"][0]["id"])


def _store(run: Run, values: list[float]) -> None:
    points = [(key, step, 1764490000.0 + step * 0.137, value)
              for key in ("loss/policy", "reward/mean", "ünï \"quoted\"")
              for step, value in enumerate(values)]  # fmt: skip
    metric_points_store(run_id=run.pk, points=points)
    RunEvent.objects.create(run=run, kind="log", message='a "quote" \\x00points\\x00',
                            time=timezone.now())  # fmt: skip
    SampleSet.objects.create(run=run, step=1, items=[{"prompt": "p", "completion": "\u2028"}])


@pytest.mark.django_db
def test_the_snapshot_text_is_json_dumps_of_the_snapshot(run):
    _store(run, AWKWARD)
    assert recent_points_json(run.pk, 500) is not None  # PostgreSQL wrote the points
    text, cursor = run_snapshot_text(run.pk)
    assert text == json.dumps(run_snapshot(run.pk))
    assert cursor == {"dispatch": run.last_dispatch, "seq": run.last_seq}
    window, _ = run_snapshot_text(run.pk, points_per_key=3)
    assert window == json.dumps(run_snapshot(run.pk, points_per_key=3))


@pytest.mark.django_db
def test_a_value_python_writes_in_full_is_encoded_in_python(run):
    _store(run, [1.0, 1.5e15, 2.0])
    assert recent_points_json(run.pk, 500) is None
    text, _ = run_snapshot_text(run.pk)
    assert text == json.dumps(run_snapshot(run.pk))
    assert "1500000000000000.0" in text


@pytest.mark.django_db
def test_a_run_without_points(run):
    text, _ = run_snapshot_text(run.pk)
    assert text == json.dumps(run_snapshot(run.pk))
    assert json.loads(text)["points"] == {}
