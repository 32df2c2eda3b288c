from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "paddock.live"
    label = "live"
