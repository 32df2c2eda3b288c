"""First-start setup of a platform: an admin account (once) and, optionally, a demo team."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction


def admin_ensure(*, home: Path, username: str = "admin") -> tuple[object, bool]:
    """Create the admin once, with a random password written (0600) under PADDOCK_HOME.
    A later start never resets a password the admin may have changed."""
    User = get_user_model()
    with transaction.atomic():
        user = User.objects.filter(username=username).first()
        if user is not None:
            return user, False
        password = os.environ.get("PADDOCK_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        user = User.objects.create_superuser(username=username, email="", password=password)
    path = home / "admin-credentials"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{username} / {password}\n")
    return user, True
