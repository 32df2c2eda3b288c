"""Paddock's control plane: a Django ASGI project.

The Celery app is imported here so that `@shared_task` binds to it in every process."""

from .celery import app as celery_app

__all__ = ["celery_app"]
