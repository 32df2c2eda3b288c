"""`manage.py check`: the front door stands in Django's chain. Django's own deploy checks
look for its SecurityMiddleware and XFrameOptionsMiddleware by name (security.W001, W002,
silenced in settings.py); FrontDoorMiddleware applies their rules now (policy.py), so this
check takes their place, as an error: without it no request of the chain meets the policy."""

from django.conf import settings
from django.core.checks import Error, Tags, register

DOOR = "paddock.http.middleware.FrontDoorMiddleware"


@register(Tags.security)
def front_door_installed(app_configs, **kwargs):
    if DOOR in settings.MIDDLEWARE:
        return []
    return [Error(f"{DOOR} is not in MIDDLEWARE: no host, https or header rule applies",
                  id="paddock.E001")]  # fmt: skip
