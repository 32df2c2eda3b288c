"""A Celery app with Paddock's broker settings and one task that touches a file: lets a
test watch a real worker consume from a Redis that is restarted under it."""

import os
from pathlib import Path

from celery import Celery

app = Celery("probe")
app.config_from_object("paddock.settings", namespace="CELERY")
app.conf.broker_url = os.environ.get("PROBE_BROKER_URL", "memory://")  # the test sets it
app.conf.task_default_queue = "probe"
app.conf.beat_schedule = {}


@app.task(name="probe.touch")
def touch(path: str) -> None:
    Path(path).write_text("done")
