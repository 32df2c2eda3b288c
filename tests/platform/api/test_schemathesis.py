"""schemathesis against /api/v1/schema/: every operation, inputs that fit the schema and
inputs that do not, a bounded number of cases each, and never a server error (a bad input
is a 4xx). Signed in with a token of team A's owner, so most operations get past auth."""

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from paddock.teams.models import ApiToken, Role
from paddock.teams.services import api_token_create

CASES = 8  # per operation and mode: ~30 operations × 2 modes × 8 ≈ 500 requests


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
    assert operations >= 25
    assert errors == []
