from django.apps import AppConfig


class OpsConfig(AppConfig):
    """The platform as its operator sees it: first start, health probes, `paddock doctor`,
    the SPA's index. Above every other app (it reads them all); nothing imports it."""

    name = "paddock.ops"
    label = "ops"
