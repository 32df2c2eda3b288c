"""Health probes of each component the platform needs. Each returns a plain dict so that
/healthz and `paddock doctor` report the same facts."""

from __future__ import annotations

import time
import uuid
from typing import Any

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection

from paddock.celery import app
from paddock.clusters.ray_jobs import cluster_version

Probe = dict[str, Any]


def _timed(fn) -> Probe:
    started = time.perf_counter()
    try:
        detail = fn()
        result: Probe = {"ok": True, **(detail or {})}
    except Exception as exc:  # a probe reports any failure; it never raises
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result


def probe_database() -> Probe:
    def check():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return {"vendor": connection.vendor}

    return _timed(check)


def probe_broker() -> Probe:
    def check():
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
        try:
            info = client.info("server")
        finally:
            client.close()
        return {"redis_version": info.get("redis_version")}

    return _timed(check)


def probe_channel_layer() -> Probe:
    async def roundtrip():
        layer = get_channel_layer()
        channel = await layer.new_channel("healthz.")
        token = uuid.uuid4().hex
        await layer.send(channel, {"type": "healthz", "token": token})
        message = await layer.receive(channel)
        if message.get("token") != token:
            raise RuntimeError("channel layer returned another message")
        return {"backend": type(layer).__name__}

    return _timed(async_to_sync(roundtrip))


def probe_celery() -> Probe:
    def check():
        replies = app.control.ping(timeout=1.0, limit=1)
        if not replies:
            raise RuntimeError("no Celery worker answered a ping within 1 s")
        return {"workers": sorted(name for reply in replies for name in reply)}

    return _timed(check)


def probe_ray() -> Probe:
    def check():
        if not settings.RAY_ADDRESS:
            raise RuntimeError("RAY_ADDRESS is not set (the Ray Jobs API address)")
        version = cluster_version(address=settings.RAY_ADDRESS)
        return {"address": settings.RAY_ADDRESS, "ray_version": version}

    return _timed(check)


def health_report() -> dict[str, Any]:
    components = {
        "database": probe_database(),
        "broker": probe_broker(),
        "channel_layer": probe_channel_layer(),
        "celery": probe_celery(),
        "ray": probe_ray(),
    }
    healthy = all(c["ok"] for c in components.values())
    return {"status": "ok" if healthy else "degraded", "components": components}
