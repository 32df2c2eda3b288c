from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "paddock.core"
    label = "core"
