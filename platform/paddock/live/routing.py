"""Websocket routes (docs/live-protocol.md)."""

from django.urls import path

from .consumers import ExperimentStreamConsumer, RunStreamConsumer

websocket_urlpatterns = [
    path("ws/runs/<int:run_id>/", RunStreamConsumer.as_asgi()),
    path("ws/experiments/<int:experiment_id>/", ExperimentStreamConsumer.as_asgi()),
]
