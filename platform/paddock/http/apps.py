from django.apps import AppConfig

from . import checks  # noqa: F401  (registers them; they read only settings)


class HttpConfig(AppConfig):
    name = "paddock.http"
    label = "paddock_http"
