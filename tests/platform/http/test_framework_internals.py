"""Where the platform reaches into a library's internals for a measured gain, each in one
small module, this fails loudly when the installed library no longer has what that module
relies on (a version upgrade), naming what to look at; so the gain never turns silently
into a wrong answer.

- http/lanes.py: a copy of Django's `ASGIHandler.handle`, with the hops merged.
- live/uvicorn_ws.py: uvicorn's websockets-sansio deflate factory.
- core/fixed_sql.py: Django's PostgreSQL cursor and connection wrapper (prepared
  statements) and its SQL compiler (`QueryTemplate`)."""

from __future__ import annotations

import hashlib
import inspect

import pytest
from django.core.handlers.asgi import ASGIHandler

# sha256 of the source of Django's ASGIHandler.handle that http/lanes.py's copy is made from
# (Django 5.2): a new Django whose handle differs must be read and the copy brought level
DJANGO_HANDLE = "98faeb5bef800331"


def _digest(function) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:16]


def test_djangos_handler_is_the_one_lanes_copies():
    assert _digest(ASGIHandler.handle) == DJANGO_HANDLE, (
        "Django's ASGIHandler.handle changed: compare it with LanedASGIHandler.handle "
        "(http/lanes.py), bring the copy level, then update DJANGO_HANDLE"
    )
    for name in ("create_request", "read_body", "send_response", "listen_for_disconnect",
                 "get_response", "chunk_size"):  # fmt: skip
        assert hasattr(ASGIHandler, name), f"ASGIHandler.{name} is gone (http/lanes.py uses it)"
    assert "is_async" in inspect.signature(ASGIHandler.load_middleware).parameters


def test_uvicorns_websocket_internals_are_the_ones_patched():
    from paddock.live.uvicorn_ws import LEVEL

    impl = pytest.importorskip("uvicorn.protocols.websockets.websockets_sansio_impl")
    factory = impl.ServerPerMessageDeflateFactory
    assert getattr(factory, "paddock_level", None) == LEVEL, "paddock.asgi did not patch it"
    assert factory().compress_settings["level"] == LEVEL  # what uvicorn builds per socket
    assert "compress_settings" in inspect.signature(factory.__mro__[1].__init__).parameters
    # what the platform leaves to uvicorn (0.55 on): a handshake it cannot parse answered
    assert hasattr(impl.WebSocketsSansIOProtocol, "handle_handshake_exception")


def test_the_prepared_statements_and_compiled_queries_find_what_they_use(db):
    from django.db import connection
    from django.db.models.sql.compiler import SQLCompiler
    from django.db.models.sql.query import Query

    for name in ("as_sql", "get_converters"):
        assert hasattr(SQLCompiler, name), f"SQLCompiler.{name} is gone (core/fixed_sql.py)"
    assert hasattr(Query, "selected") or hasattr(Query, "values_select")
    if connection.vendor != "postgresql":
        return
    import psycopg
    from django.db.backends.postgresql.base import ServerBindingCursor
    from django.db.backends.postgresql.psycopg_any import register_tzloader  # noqa: F401

    parameters = inspect.signature(ServerBindingCursor.execute).parameters
    assert {"prepare", "binary"} <= set(parameters), "psycopg's execute lost prepare/binary"
    assert isinstance(inspect.getattr_static(psycopg.Connection, "prepare_threshold"), property)
    for name in ("_prepare_cursor", "close_if_health_check_failed", "wrap_database_errors",
                 "timezone"):  # fmt: skip
        assert hasattr(connection, name), f"Django's connection wrapper lost {name}"
    from paddock.core.fixed_sql import statement_cursor

    with statement_cursor() as cursor:  # prepared, and answers as Django's cursor would
        cursor.execute("SELECT %s::int + 1", [41])
        assert cursor.fetchone() == (42,)
