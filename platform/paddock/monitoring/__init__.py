"""Prometheus figures of the platform: the web processes, Celery and runs (docs/metrics-out.md)."""
