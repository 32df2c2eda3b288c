"""Websocket routes. Consumers are added by the live-stream work (run.<id>, experiment.<id>)."""

websocket_urlpatterns: list = []
