"""Runs' alarms (workers/alarms.py), as GET /runs/{id}/alarms and GET /alarms answer: each
row the live stream's `AlarmRow` (workers/live_messages.py), the one definition of its shape;
drf-spectacular reads these pydantic models into the OpenAPI schema."""

from __future__ import annotations

from pydantic import BaseModel
from rest_framework import serializers

from workers.live_messages import AlarmRow

from .metrics import ComparedRunsQuerySerializer


class RunAlarms(BaseModel):
    run_id: int
    alarms: list[AlarmRow]


class ComparedAlarms(BaseModel):
    runs: list[RunAlarms]


class AlarmArmSerializer(serializers.Serializer):
    pause = serializers.BooleanField(help_text="pause the run when this alarm fires")


class ComparedAlarmsQuerySerializer(ComparedRunsQuerySerializer):
    pass
