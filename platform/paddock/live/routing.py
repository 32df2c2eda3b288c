"""Websocket routes (docs/live-protocol.md)."""

from django.urls import path

from . import handshake  # noqa: F401  (registers the `id` converter)
from .consumers import ExperimentStreamConsumer, RunStreamConsumer

websocket_urlpatterns = [
    path("ws/runs/<id:run_id>/", RunStreamConsumer.as_asgi()),
    path("ws/experiments/<id:experiment_id>/", ExperimentStreamConsumer.as_asgi()),
]
