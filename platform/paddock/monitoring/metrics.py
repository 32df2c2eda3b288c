"""The platform's Prometheus series, defined once, and how a scrape reads them.

Counters and histograms are recorded where things happen (a request, an ingest batch, a
dispatch, a Celery task) by whichever process does it. Under several processes (uvicorn's
workers, Celery's pool) `PROMETHEUS_MULTIPROC_DIR` names a directory they all write to
(prometheus_client's multiprocess mode: the variable must be set before the process starts,
and the directory must start empty, e.g. an emptyDir volume or what `paddock up` clears); a
scrape then sums every process's files. Without it, a scrape reads this process alone.

Gauges of the whole platform (runs by state, alarms firing, Celery's queue depth) are not
recorded at all: `StateCollector` asks the database and Redis at scrape time, one cheap
query each, so every process answers the same and nothing goes stale.
"""

from __future__ import annotations

import logging
import os

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

log = logging.getLogger(__name__)

if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # a series' first value creates its file there
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

# every series this module defines is written to this registry (in multiprocess mode, to
# the directory's files as well, which is what a scrape then reads)
RECORDED = CollectorRegistry(auto_describe=True)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
SLOW_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)

HTTP_REQUESTS = Counter(
    "paddock_http_requests", "HTTP requests answered by Django, by route name",
    ["route", "method", "status"], registry=RECORDED,
)  # fmt: skip
HTTP_LATENCY = Histogram(
    "paddock_http_request_duration_seconds", "Time to answer an HTTP request, by route name",
    ["route", "method"], buckets=LATENCY_BUCKETS, registry=RECORDED,
)  # fmt: skip
INGEST_BATCHES = Counter(
    "paddock_ingest_batches", "Ingest batches stored (retries acknowledged again not counted)",
    registry=RECORDED,
)  # fmt: skip
INGEST_POINTS = Counter(
    "paddock_ingest_points", "Metric points stored by the ingest: rate() is points per second",
    registry=RECORDED,
)  # fmt: skip
DISPATCH_LATENCY = Histogram(
    "paddock_dispatch_latency_seconds",
    "From a run entering queued to its Ray job submitted (state starting)",
    buckets=SLOW_BUCKETS, registry=RECORDED,
)  # fmt: skip
CELERY_TASK_LATENCY = Histogram(
    "paddock_celery_task_duration_seconds", "Time a Celery task ran, by task name",
    ["task"], buckets=LATENCY_BUCKETS + (60, 300), registry=RECORDED,
)  # fmt: skip
CELERY_TASK_FAILURES = Counter(
    "paddock_celery_task_failures", "Celery tasks that raised, by task name",
    ["task"], registry=RECORDED,
)  # fmt: skip


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class StateCollector:
    """Series read at scrape time: runs by state (one GROUP BY over the state index), the
    alarms firing on unfinished runs (one GROUP BY) and the depth of Celery's queues (Redis
    LLEN). A part that fails is left out of the scrape
    (and logged); the rest still answers."""

    def collect(self):
        yield from self._runs()
        yield from self._alarms()
        yield from self._queues()

    def _alarms(self):
        from paddock.experiments.alarms import alarms_firing_counts

        try:
            counts = alarms_firing_counts()
        except Exception:
            log.exception("metrics: the runs' alarms could not be read")
            return
        family = GaugeMetricFamily(
            "paddock_alarms_firing",
            "Unfinished runs on which an alarm fires (docs/alarms.md)",
            labels=["alarm"],
        )
        for alarm, n in counts.items():  # every alarm, 0 included
            family.add_metric([alarm], n)
        yield family

    def _runs(self):
        from django.db.models import Count

        from paddock.experiments.models import Run, RunState

        try:
            counts = dict(Run.objects.values_list("state").annotate(n=Count("id")).order_by())
        except Exception:
            log.exception("metrics: runs by state could not be read")
            return
        family = GaugeMetricFamily("paddock_runs", "Runs by state", labels=["state"])
        for state in RunState.values:  # every state, 0 included: a series never vanishes
            family.add_metric([state], counts.get(state, 0))
        yield family

    def _queues(self):
        import redis
        from django.conf import settings

        queues = celery_queues()
        try:
            client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
            with client.pipeline(transaction=False) as pipe:
                for queue in queues:
                    for key in _queue_keys(queue):
                        pipe.llen(key)
                lengths = pipe.execute()
        except Exception:
            log.exception("metrics: Celery's queue depth could not be read")
            return
        family = GaugeMetricFamily(
            "paddock_celery_queue_length", "Tasks waiting in a Celery queue", labels=["queue"]
        )
        per_queue = len(_queue_keys(""))
        for i, queue in enumerate(queues):
            family.add_metric([queue], sum(lengths[i * per_queue : (i + 1) * per_queue]))
        yield family


def celery_queues() -> list[str]:
    from django.conf import settings

    return [getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", "celery")]


def _queue_keys(queue: str) -> list[str]:
    # kombu's Redis transport keeps a queue as one list per priority step: the name itself
    # (priority 0) and name + "\x06\x16" + step for the others
    return [queue] + [f"{queue}\x06\x16{step}" for step in (3, 6, 9)]


STATE = CollectorRegistry(auto_describe=False)
STATE.register(StateCollector())


def scrape(state: bool = True) -> bytes:
    """The text exposition of a scrape: the recorded series (of every process sharing the
    multiprocess directory, or of this one), then (`state`) the state read now."""
    directory = multiprocess_dir()
    if directory:
        recorded = CollectorRegistry()
        MultiProcessCollector(recorded, path=directory)
    else:
        recorded = RECORDED
    return generate_latest(recorded) + (generate_latest(STATE) if state else b"")


def ingest_stored(points: int) -> None:
    """One ingest batch committed, holding `points` metric points."""
    INGEST_BATCHES.inc()
    INGEST_POINTS.inc(points)


def dispatch_started(run_id: int, created_at) -> None:
    """A run's job was submitted: observe how long ago the run entered queued (its last
    status event into queued, or its creation for a first dispatch)."""
    from django.utils import timezone

    from paddock.experiments.models import RunEvent

    try:
        since = (
            RunEvent.objects.filter(run_id=run_id, kind=RunEvent.Kind.STATUS,
                                    message__contains="→ queued")
            .order_by("-id").values_list("time", flat=True).first()
        )  # fmt: skip
        waited = (timezone.now() - (since or created_at)).total_seconds()
    except Exception:  # a figure is never worth a failed dispatch
        log.exception("metrics: the dispatch latency of run %s could not be read", run_id)
        return
    DISPATCH_LATENCY.observe(max(0.0, waited))
