"""Prometheus `/metrics`, scraped from real server processes: uvicorn with two workers and a
shared PROMETHEUS_MULTIPROC_DIR (every scrape, whichever worker answers it, sums both), a
real Celery worker serving its own scrape port. The series move after a request, an ingest
batch, a Celery task; runs by state follow the database; nobody without the token (or off
the machine) reads it."""

from __future__ import annotations

import os
import sys

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from paddock.experiments.models import Run, RunEvent
from paddock.experiments.states import run_transition
from paddock.experiments.tokens import run_token_mint
from paddock.monitoring import metrics as prom
from tests.conftest import REPO, free_port, service_env, wait_for
from tests.serving import serving

TOKEN = "scrape-secret"


def samples(text: str) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def prom_env(django_db_setup, tmp_path):
    from django.conf import settings

    directory = tmp_path / "prometheus"
    directory.mkdir()
    db_name = str(settings.DATABASES["default"]["NAME"])
    return service_env(PADDOCK_TEST_DB_NAME=db_name, PROMETHEUS_MULTIPROC_DIR=str(directory),
                       PADDOCK_METRICS_TOKEN=TOKEN)  # fmt: skip


@pytest.fixture
def two_workers(prom_env):
    """uvicorn as in production: two worker processes behind one port."""
    url = f"http://127.0.0.1:{free_port()}"
    argv = [sys.executable, "-m", "uvicorn", "paddock.asgi:application", "--host", "127.0.0.1",
            "--port", url.rsplit(":", 1)[1], "--workers", "2", "--lifespan", "off",
            "--ws", "websockets-sansio", "--no-proxy-headers",
            "--log-level", "warning"]  # fmt: skip
    with serving(argv, ready_url=f"{url}/livez", what="uvicorn with two workers", env=prom_env,
                 cwd=REPO, timeout_s=90):  # fmt: skip
        yield url


def scrape(url: str) -> dict[tuple, float]:
    reply = requests.get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"},
                         timeout=30)  # fmt: skip
    assert reply.status_code == 200, reply.text[:300]
    assert reply.headers["Content-Type"].startswith("text/plain")
    return samples(reply.text)


def healthz_count(values: dict) -> float:
    key = ("paddock_http_requests_total",
           (("method", "GET"), ("route", "healthz"), ("status", "200")))  # fmt: skip
    return values.get(key, 0.0)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_series_move_after_requests_and_an_ingest(two_workers, launched, prom_env):
    url = two_workers
    assert requests.get(f"{url}/metrics", timeout=10).status_code == 403  # no token
    assert requests.get(f"{url}/metrics", headers={"Authorization": "Bearer wrong"},
                        timeout=10).status_code == 403  # fmt: skip

    before = scrape(url)
    for _ in range(30):  # fresh connections: the two workers share them out
        assert requests.get(f"{url}/healthz", timeout=10).status_code == 200
    # every scrape, whichever worker answers it, holds both workers' requests
    counts = {healthz_count(scrape(url)) - healthz_count(before) for _ in range(6)}
    assert counts == {30.0}
    latency = scrape(url)
    bucket = ("paddock_http_request_duration_seconds_count",
              (("method", "GET"), ("route", "healthz")))  # fmt: skip
    assert latency[bucket] >= 30

    # an ingest batch of 3 steps × 2 keys: 6 points, 1 batch
    run = Run.objects.get(pk=launched[0]["runs"][0]["id"])
    Run.objects.filter(pk=run.pk).update(dispatch_count=1)
    run_transition(run=run, to_state="dispatching")
    token = run_token_mint(run=run, dispatch=1)
    events = [{"type": "metric", "step": s, "time": 1764490000.0 + s,
               "values": {"reward/mean": 0.1 * s, "kl": 0.01}} for s in range(3)]  # fmt: skip
    points = ("paddock_ingest_points_total", ())
    batches = ("paddock_ingest_batches_total", ())
    start = scrape(url)
    reply = requests.post(f"{url}/api/v1/runs/{run.pk}/ingest",
                          json={"dispatch": 1, "seq": 0, "events": events},
                          headers={"Authorization": f"Bearer {token}"}, timeout=30)  # fmt: skip
    assert reply.status_code == 200, reply.text
    requests.post(f"{url}/api/v1/runs/{run.pk}/ingest",  # a retry: acknowledged, not counted
                  json={"dispatch": 1, "seq": 0, "events": events},
                  headers={"Authorization": f"Bearer {token}"}, timeout=30)  # fmt: skip
    after = scrape(url)
    assert after.get(points, 0) - start.get(points, 0) == 6
    assert after.get(batches, 0) - start.get(batches, 0) == 1

    # runs by state, read from the database at scrape time
    by_state = {dict(labels)["state"]: v for (name, labels), v in after.items()
                if name == "paddock_runs"}  # fmt: skip
    assert by_state["dispatching"] == Run.objects.filter(state="dispatching").count() >= 1
    assert by_state["queued"] == Run.objects.filter(state="queued").count()

    # Celery's queue depth, read from Redis at scrape time: three tasks no worker has taken
    from django.conf import settings

    from paddock.celery import app

    depth = ("paddock_celery_queue_length", (("queue", settings.CELERY_TASK_DEFAULT_QUEUE),))
    assert depth in after
    if not app.control.ping(timeout=1):  # (a worker of this session would take them)
        try:
            for _ in range(3):
                app.send_task("paddock.clusters.tasks.run_dispatch", args=[987654321])
            assert scrape(url)[depth] == after[depth] + 3
        finally:
            app.control.purge()


def test_a_scrape_reaches_the_series_by_ip_over_plain_http(client, settings, db):
    """Who may scrape: tests/platform/http/test_front_door.py (the rule at both scrape doors)."""
    settings.PADDOCK_METRICS_TOKEN = TOKEN
    ok = client.get("/metrics", REMOTE_ADDR="10.0.0.7", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert ok.status_code == 200 and b"paddock_runs" in ok.content
    # a scraper reaches a pod by its IP over plain http: no allowed Host, no https redirect
    settings.SECURE_SSL_REDIRECT = True
    by_ip = client.get("/metrics", REMOTE_ADDR="10.0.0.7", HTTP_HOST="10.1.2.3:8000",
                       HTTP_AUTHORIZATION=f"Bearer {TOKEN}")  # fmt: skip
    assert by_ip.status_code == 200 and b"paddock_runs" in by_ip.content
    assert client.get("/healthz", HTTP_HOST="10.1.2.3:8000").status_code == 400  # the rest: no


def test_dispatch_latency_counts_from_the_last_entry_into_queued(launched, db):
    run = Run.objects.get(pk=launched[0]["runs"][0]["id"])
    count = "paddock_dispatch_latency_seconds_count"
    n0 = prom.RECORDED.get_sample_value(count) or 0
    s0 = prom.RECORDED.get_sample_value("paddock_dispatch_latency_seconds_sum") or 0
    from django.utils import timezone

    # a retry: the run went back to queued 120 s ago (created long before)
    RunEvent.objects.create(run=run, dispatch=1, kind=RunEvent.Kind.STATUS, level="info",
                            message="failed → queued: retrying",
                            time=timezone.now() - timezone.timedelta(seconds=120))  # fmt: skip
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timezone.timedelta(days=1))
    run.refresh_from_db()
    prom.dispatch_started(run.pk, run.created_at)
    assert prom.RECORDED.get_sample_value(count) == n0 + 1
    waited = prom.RECORDED.get_sample_value("paddock_dispatch_latency_seconds_sum") - s0
    assert 120 <= waited < 180


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_serves_its_task_latency_and_failures(prom_env, world):
    from paddock.celery import app

    port = free_port()
    env = {**prom_env, "PADDOCK_WORKER_METRICS_PORT": str(port)}
    app.control.purge()
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    argv = [sys.executable, "-m", "celery", "-A", "paddock", "worker", "--loglevel=WARNING",
            "--concurrency=2", "--pool=prefork", f"--hostname=prom-{os.getpid()}@%h"]  # fmt: skip
    with serving(argv, ready_url=f"{url}/metrics", headers=headers, env=env, cwd=REPO,
                 what="the Celery worker's scrape port", timeout_s=180):  # fmt: skip
        assert requests.get(f"{url}/metrics", timeout=5).status_code == 403
        # a real task of the platform, sent through the broker: dispatch of a run that is
        # not there finds nothing to do, and one of a malformed id raises
        app.send_task("paddock.clusters.tasks.run_dispatch", args=[987654321])
        app.send_task("paddock.clusters.tasks.run_dispatch", args=["not-an-id"])
        name = "paddock.clusters.tasks.run_dispatch"
        duration = ("paddock_celery_task_duration_seconds_count", (("task", name),))
        failures = ("paddock_celery_task_failures_total", (("task", name),))

        def both_seen():
            got = samples(requests.get(f"{url}/metrics", headers=headers, timeout=5).text)
            return got.get(duration, 0) >= 2 and got.get(failures, 0) >= 1

        wait_for(both_seen, 60, "the worker's task series")
        got = samples(requests.get(f"{url}/metrics", headers=headers, timeout=5).text)
        assert not any(name == "paddock_runs" for name, _ in got)  # the web's scrape has it
