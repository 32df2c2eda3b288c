"""schemathesis against /api/v1/schema/: every operation, inputs that fit the schema and
inputs that do not, a bounded number of cases each, and never a server error (a bad input
is a 4xx). Signed in with a token of team A's owner, so most operations get past auth.

A third pass takes inputs that fit the schema and makes them hostile in the two ways a
schema cannot describe and a probe of the platform found 500s with: every integer (body,
query, path) replaced by one outside signed 64 bits, and text query values by such numbers
as text, or a body value (or the whole body, also for an operation that takes none)
replaced by JSON nested thousands of levels deep."""

import json
from typing import Any

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from paddock.teams.models import ApiToken, Role
from paddock.teams.services import api_token_create

CASES = 8  # per operation and mode: ~30 operations × 2 modes × 8 ≈ 500 requests
HOSTILE_CASES = 6  # per operation: half out-of-range integers, half deep nesting
BIG_INTS = [2**63, -(2**63) - 1, 2**64, 10**30, 2**1000]
# a query string is text: a parameter the schema calls a string may still be read as numbers
# (`?runs=1,2`, `?state=…`), so its value is sometimes one of these instead
BIG_INT_TEXTS = [str(2**63), f"1,{2**64}", str(-(2**63) - 1), "9" * 400]
DEEP = ["[" * 5000 + "]" * 5000, '{"a":' * 3000 + "0" + "}" * 3000, "[" * 300 + "]" * 300]


def _big_ints(value: Any, draw) -> Any:
    """`value` with every integer (not bool) replaced by one past 64 bits."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return draw(st.sampled_from(BIG_INTS))
    if isinstance(value, dict):
        return {k: _big_ints(v, draw) for k, v in value.items()}
    if isinstance(value, list):
        return [_big_ints(v, draw) for v in value]
    return value


def _big_query(query: dict, draw) -> dict:
    """`query` with its integers past 64 bits and each text value, half the time, a number
    past 64 bits as text."""
    query = _big_ints(query, draw)
    return {
        k: draw(st.sampled_from(BIG_INT_TEXTS)) if isinstance(v, str) and draw(st.booleans())
        else v
        for k, v in query.items()
    }  # fmt: skip


def _deep_body(body: Any, draw) -> bytes:
    """The body as JSON text, one of its values (or the whole) nested thousands deep; text,
    because json.dumps would itself overflow the stack on such a value."""
    deep = draw(st.sampled_from(DEEP))
    if not isinstance(body, dict) or not body:
        return deep.encode()
    chosen = draw(st.sampled_from(sorted(body)))
    parts = [f"{json.dumps(k)}: {deep if k == chosen else json.dumps(v)}" for k, v in body.items()]
    return ("{" + ", ".join(parts) + "}").encode()


@pytest.fixture
def wsgi_app(bearer):
    # as Django's test client does: a request must not close the test's connection (after
    # `bearer`, whose test-client requests connect the receivers again when they finish)
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture
def bearer(world, launched):
    owner = world.users_a[Role.OWNER]
    _, secret = api_token_create(actor=world.actor(owner), team=world.team_a, name="fuzz")
    return {"Authorization": f"Bearer {secret}"}


def test_no_input_makes_a_server_error(wsgi_app, bearer):
    schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", wsgi_app)
    errors, operations = [], 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=CASES, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))  # fmt: skip
            def call(case):
                response = case.call(headers=bearer)
                ApiToken.objects.update(revoked_at=None)  # a fuzzed DELETE may revoke ours
                if response.status_code >= 500:
                    errors.append(f"{case.method} {case.formatted_path} {case.query} "
                                  f"{case.body!r:.200} → {response.status_code}")  # fmt: skip

            call()

        @given(
            case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
            data=st.data(),
            deep=st.booleans(),
        )
        @settings(max_examples=HOSTILE_CASES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        def hostile(case, data, deep):
            kwargs: dict[str, Any] = {}
            json_body = case.body is not None and "json" in (case.media_type or "")
            # an operation that takes no body gets one too: it must not read it into a 500
            bodiless = case.body is None and case.method.upper() in ("POST", "PUT", "PATCH")
            if deep and (json_body or bodiless):
                kwargs["data"] = _deep_body(case.body, data.draw)
                headers = {**bearer, "Content-Type": "application/json"}
            else:
                deep = False
                for name in ("body", "path_parameters"):
                    value = getattr(case, name, None)
                    if isinstance(value, dict | list):
                        setattr(case, name, _big_ints(value, data.draw))
                if isinstance(case.query, dict):
                    case.query = _big_query(case.query, data.draw)
                headers = bearer
            response = case.call(headers=headers, **kwargs)
            ApiToken.objects.update(revoked_at=None)
            if response.status_code >= 500:
                what = "deep" if deep else f"{case.query} {case.body!r:.200}"
                errors.append(f"hostile {case.method} {case.formatted_path} {what} "
                              f"→ {response.status_code}")  # fmt: skip

        hostile()
    assert operations >= 25
    assert errors == []
