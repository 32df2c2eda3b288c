"""GET /runs/{id}/metrics/export: every stored point exactly once, at full resolution (past
the metrics API's 10,000-point cap), CSV and Parquet read back equal to the stored rows;
team-scoped like every run endpoint; a bad format is a 400 naming `format`."""

from __future__ import annotations

import io
import math

import pandas as pd
import pyarrow.parquet as pq
import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from paddock.experiments import metrics_export
from paddock.experiments.metrics import MAX_POINTS_LIMIT, metric_points_store
from paddock.experiments.models import MetricPoint
from paddock.teams.models import Role

POINTS = MAX_POINTS_LIMIT + 2_345  # more than the metrics API would ever return of one key


@pytest.fixture
def stored(launched):
    run_id = launched[0]["runs"][0]["id"]
    other = launched[0]["runs"][1]["id"]  # a second run of the team: none of its points leak
    points = [("reward/mean", s, 1e9 + s * 0.5, math.sin(s) / 3) for s in range(POINTS)]
    points += [("kl", s, 1e9 + s, s * 1e-7) for s in range(0, POINTS, 7)]
    # a key a CSV must quote, a NaN and an infinity the ingest of another client may store
    points += [('odd,"key"', 1, 5.0, float("nan")), ('odd,"key"', 2, 6.0, float("inf"))]
    metric_points_store(run_id=run_id, points=points)
    metric_points_store(run_id=other, points=[("reward/mean", 0, 1.0, 99.0)])
    return run_id


def _rows(run_id: int, keys: list[str] | None = None) -> list[tuple]:
    points = MetricPoint.objects.filter(run_id=run_id)
    if keys:
        points = points.filter(key__in=keys)
    return list(points.order_by("key", "step").values_list("step", "key", "value", "time"))


def _same(got: list[tuple], want: list[tuple]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g[:2] == w[:2], (g, w)
        for a, b in zip(g[2:], w[2:], strict=True):  # exact, NaN equal to NaN
            assert a == b or (math.isnan(a) and math.isnan(b)), (g, w)


def _frame_rows(frame: pd.DataFrame) -> list[tuple]:
    assert list(frame.columns) == ["step", "key", "value", "time"]
    return [(int(s), k, float(v), float(t)) for s, k, v, t in frame.itertuples(index=False)]


def _get(client, url: str):
    reply = client.get(url)
    body = b"".join(reply.streaming_content) if reply.status_code == 200 else None
    return reply, body


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    # several chunks (and Parquet row groups) even for this test's few thousand points
    monkeypatch.setattr(metrics_export, "CHUNK_ROWS", 1000)


def test_csv_holds_every_point_once_equal_to_the_stored_rows(world, stored, client_as):
    client = client_as(world.users_a[Role.VIEWER])  # a viewer may export
    reply, body = _get(client, f"/api/v1/runs/{stored}/metrics/export?format=csv")
    assert reply.status_code == 200
    assert reply["Content-Type"].startswith("text/csv")
    assert f'filename="run-{stored}-metrics.csv"' in reply["Content-Disposition"]
    frame = pd.read_csv(io.BytesIO(body), keep_default_na=False, na_values=["nan"])
    rows = _frame_rows(frame)
    assert len(set((s, k) for s, k, *_ in rows)) == len(rows)  # no point twice
    assert sum(1 for r in rows if r[1] == "reward/mean") == POINTS
    _same(rows, _rows(stored))


def test_parquet_reads_back_equal_in_row_groups(world, stored, client_as):
    client = client_as(world.users_a[Role.VIEWER])
    reply, body = _get(client, f"/api/v1/runs/{stored}/metrics/export?format=parquet")
    assert reply.status_code == 200
    assert reply["Content-Type"] == "application/vnd.apache.parquet"
    parquet = pq.ParquetFile(io.BytesIO(body))
    assert parquet.num_row_groups == math.ceil(len(_rows(stored)) / 1000)  # written by chunk
    table = parquet.read()
    assert [str(t) for t in table.schema.types] == ["int64", "string", "double", "double"]
    _same(_frame_rows(table.to_pandas()), _rows(stored))


def test_keys_filter_and_a_run_without_points(world, stored, launched, client_as):
    client = client_as(world.users_a[Role.VIEWER])
    reply, body = _get(client, f"/api/v1/runs/{stored}/metrics/export?format=parquet&keys=kl")
    _same(_frame_rows(pq.read_table(io.BytesIO(body)).to_pandas()), _rows(stored, ["kl"]))
    reply, body = _get(client, f"/api/v1/runs/{stored}/metrics/export?keys=nothing")
    assert reply.status_code == 200 and body == b"step,key,value,time\n"
    reply, body = _get(client, f"/api/v1/runs/{stored}/metrics/export?keys=nothing&format=parquet")
    assert pq.read_table(io.BytesIO(body)).num_rows == 0


def test_another_team_gets_the_404_of_a_missing_run(world, stored, client_as):
    client = client_as(world.users_b[Role.OWNER])
    for fmt in ("csv", "parquet", "xml"):  # the format is not checked before the team
        reply = client.get(f"/api/v1/runs/{stored}/metrics/export?format={fmt}")
        missing = client.get(f"/api/v1/runs/987654321/metrics/export?format={fmt}")
        assert reply.status_code == missing.status_code == 404
        assert reply.json() == missing.json() == {
            "code": "not_found", "message": "run not found", "field": None}  # fmt: skip
    assert client_as(None).get(f"/api/v1/runs/{stored}/metrics/export").status_code == 401


def test_a_bad_format_is_a_400_naming_format(world, stored, client_as):
    client = client_as(world.users_a[Role.VIEWER])
    reply = client.get(f"/api/v1/runs/{stored}/metrics/export?format=xlsx")
    assert reply.status_code == 400
    assert reply.json()["field"] == "format"
    assert "csv" in reply.json()["message"] or "valid choice" in reply.json()["message"]


@pytest.mark.django_db(transaction=True)
def test_a_real_asgi_server_streams_the_export(world, stored, asgi_server):
    """Under ASGI the chunks are pulled one by one (api/streaming.py): chunked transfer, no
    length known in advance, and the same rows as the stored ones."""
    import requests

    from paddock.teams.services import api_token_create

    viewer = world.users_a[Role.VIEWER]
    raw = api_token_create(actor=world.actor(viewer), team=world.team_a, name="export")[1]
    url = f"{asgi_server.url}/api/v1/runs/{stored}/metrics/export?format=csv"
    with requests.get(url, headers={"Authorization": f"Bearer {raw}"}, stream=True,
                      timeout=60) as reply:  # fmt: skip
        assert reply.status_code == 200, reply.text[:300]
        assert reply.headers.get("Transfer-Encoding") == "chunked"
        body = b"".join(reply.iter_content(1 << 16))
    frame = pd.read_csv(io.BytesIO(body), keep_default_na=False, na_values=["nan"])
    _same(_frame_rows(frame), _rows(stored))


@pytest.mark.django_db(transaction=True)
async def test_under_asgi_the_chunks_are_pulled_one_at_a_time(world, stored):
    # Django's ASGI handler would read a synchronous iterator whole before sending a byte
    from django.test import AsyncClient

    client = AsyncClient()
    await client.aforce_login(world.users_a[Role.VIEWER])
    try:
        reply = await client.get(f"/api/v1/runs/{stored}/metrics/export?format=csv")
        assert reply.status_code == 200 and reply.is_async
        pieces = [piece async for piece in reply.streaming_content]
        stored_rows = await sync_to_async(_rows)(stored)
    finally:  # the request thread's connection, or the test database cannot be dropped
        await sync_to_async(connections.close_all)()
    assert len(pieces) > 10  # a header, then one piece per chunk of 1000 rows
    assert b"".join(pieces).count(b"\n") == 1 + len(stored_rows)


def test_keys_no_column_holds_are_absent_or_refused(world, stored, client_as):
    client = client_as(world.users_a[Role.VIEWER])
    for keys in ("x" * 300, "%F0%9F%92%A1"):
        reply, body = _get(client, f"/api/v1/runs/{stored}/metrics/export?keys={keys}")
        assert (reply.status_code, body) == (200, b"step,key,value,time\n"), keys
    for keys in ("%00", "a%00b"):  # PostgreSQL's text holds no NUL: refused, never a 500
        reply = client.get(f"/api/v1/runs/{stored}/metrics/export?keys={keys}")
        assert (reply.status_code, reply.json()["field"]) == (400, "keys"), keys
