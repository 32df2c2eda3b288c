from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "paddock.experiments"
    label = "experiments"
