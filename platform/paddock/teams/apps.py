from django.apps import AppConfig


class TeamsConfig(AppConfig):
    name = "paddock.teams"
    label = "teams"
