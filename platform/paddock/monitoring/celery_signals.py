"""Celery's task latency and failures, from Celery's signals, in the process that ran the
task (a pool child under prefork: PROMETHEUS_MULTIPROC_DIR lets the pool's processes add
up). With `PADDOCK_WORKER_METRICS_PORT` set, the worker's main process also serves the
scrape of those series on that port (the web's `/metrics` serves them too when both share
one multiprocess directory, as under `paddock up`), with the web's access rule (http/policy.py:
metrics_scrape_allowed)."""

from __future__ import annotations

import logging
import os
import threading
import time
from wsgiref.simple_server import WSGIRequestHandler, make_server

from celery.signals import task_failure, task_postrun, task_prerun, worker_ready

from paddock.http.policy import metrics_scrape_allowed
from paddock.monitoring.metrics import CELERY_TASK_FAILURES, CELERY_TASK_LATENCY, scrape

log = logging.getLogger(__name__)
_started: dict[str, float] = {}  # task id → when it began, in this process


@task_prerun.connect
def _task_started(task_id=None, **_):
    _started[task_id] = time.perf_counter()


@task_postrun.connect
def _task_done(task_id=None, task=None, **_):
    began = _started.pop(task_id, None)
    if began is not None and task is not None:
        CELERY_TASK_LATENCY.labels(task.name).observe(time.perf_counter() - began)


@task_failure.connect
def _task_failed(sender=None, **_):
    CELERY_TASK_FAILURES.labels(getattr(sender, "name", "unknown")).inc()


def _scrape_app(meta, start_response):  # WSGI: `meta` is the request environ
    allowed = metrics_scrape_allowed(
        authorization=meta.get("HTTP_AUTHORIZATION", ""), peer=meta.get("REMOTE_ADDR"),
        proxied="HTTP_X_FORWARDED_FOR" in meta or "HTTP_FORWARDED" in meta,
    )  # fmt: skip
    if not allowed or meta.get("PATH_INFO") != "/metrics":
        start_response("403 Forbidden" if not allowed else "404 Not Found", [])
        return [b""]
    body = scrape(state=False)  # runs by state and queue depth: the web's scrape has them
    start_response("200 OK", [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")])
    return [body]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args) -> None:  # a scrape every 15 s is not worth a log line
        pass


@worker_ready.connect
def _serve_scrape(**_):
    port = os.environ.get("PADDOCK_WORKER_METRICS_PORT")
    if not port:
        return
    server = make_server("0.0.0.0", int(port), _scrape_app, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    log.info("Celery worker metrics on :%s/metrics", port)
