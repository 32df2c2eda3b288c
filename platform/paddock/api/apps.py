from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "paddock.api"
    label = "api"
