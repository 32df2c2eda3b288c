from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "paddock.api"
    label = "api"

    def ready(self):
        # registers the OpenAPI description of Bearer tokens with drf-spectacular
        from paddock.api import authentication  # noqa: F401
