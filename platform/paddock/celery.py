"""The Celery app. Tasks live in each app's tasks.py and take ids, never model instances."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddock.settings")

app = Celery("paddock")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# task latency and failures for Prometheus (and the worker's scrape port, when set)
import paddock.monitoring.celery_signals  # noqa: E402, F401
