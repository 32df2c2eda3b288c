"""The premise of the platform image: the control plane starts, loads every Celery task and
the Ray Jobs client, and passes Django's deployment checks, with torch and the engines
impossible to import, on the production settings the deployment files give it."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import textwrap

from .conftest import REPO

PROBE = textwrap.dedent(
    """
    import importlib.abc, sys
    BLOCKED = {"torch", "transformers", "peft", "safetensors", "vllm", "tensorrt_llm"}

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"the control plane imported {name}")

    sys.meta_path.insert(0, Block())
    import django
    django.setup()
    import paddock.asgi, paddock.urls
    from paddock.celery import app
    app.loader.import_default_modules()
    import paddock.clusters.tasks, paddock.ops.health, ray.job_submission
    import paddock.ops.management.commands.paddock_bootstrap
    from django.core.management import call_command
    call_command("check", "--deploy", "--fail-level", "WARNING")
    print("started without", sorted(BLOCKED))
    """
)


def test_control_plane_starts_without_torch_on_production_settings(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDOCK_", "DJANGO_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(REPO / "platform"), str(REPO)]),
        DJANGO_SETTINGS_MODULE="paddock.settings",
        PADDOCK_HOME=str(tmp_path),
        PADDOCK_SECRET_KEY=secrets.token_urlsafe(50),
        PADDOCK_PUBLIC_URL="https://paddock.example.com",
        PADDOCK_ALLOWED_HOSTS="paddock.example.com",
        PADDOCK_ARTIFACTS_URI="file:///srv/paddock/artifacts",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        REDIS_URL="redis://127.0.0.1:1/0",  # never contacted: nothing here talks to Redis
        RAY_ADDRESS="http://127.0.0.1:1",
    )
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "started without" in result.stdout
