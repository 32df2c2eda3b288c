"""What the live stream keeps beside the experiments app's tables."""

from __future__ import annotations

from django.db import models


class BatchSummary(models.Model):
    """Where one stored ingest batch left the run's stream, so a websocket client that
    reconnects with a cursor (dispatch, seq) gets exactly what was stored after it:
    the metric steps from `min_step` on and the events after `last_event_id`."""

    run = models.ForeignKey("experiments.Run", on_delete=models.CASCADE, related_name="+")
    dispatch = models.PositiveIntegerField()
    seq = models.BigIntegerField()
    min_step = models.BigIntegerField(null=True)
    last_event_id = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "dispatch", "seq"], name="batchsummary_once")
        ]
