"""The one exception handler answers every error with an `ErrorCode` member and its status,
DRF's own exceptions included, in the body clients already parse."""

from __future__ import annotations

import json

import pytest
from rest_framework import exceptions

from paddock.api.exceptions import exception_handler
from paddock.core.errors import DomainError, ErrorCode

DRF_ERRORS = [
    exceptions.ParseError(),
    exceptions.AuthenticationFailed(),
    exceptions.NotAuthenticated(),
    exceptions.PermissionDenied(),
    exceptions.NotFound(),
    exceptions.MethodNotAllowed("DELETE"),
    exceptions.NotAcceptable(),
    exceptions.UnsupportedMediaType("text/csv"),
    exceptions.Throttled(3),
]


@pytest.mark.parametrize("exc", DRF_ERRORS, ids=lambda e: type(e).__name__)
def test_drf_exceptions_answer_with_a_catalogued_code_and_its_status(exc):
    response = exception_handler(exc, {})
    code = ErrorCode(response.data["code"])
    assert code is not ErrorCode.ERROR and response.status_code == code.status
    assert set(response.data) == {"code", "message", "field"}


def test_a_domain_error_answers_with_its_code_s_status_in_the_one_body():
    error = DomainError(ErrorCode.SLUG_TAKEN, "a team 'a' exists already", field="slug")
    response = exception_handler(error, {})
    assert response.status_code == 409
    # byte for byte what clients parsed before the codes were an enum
    assert json.dumps(response.data) == (
        '{"code": "slug_taken", "message": "a team \'a\' exists already", "field": "slug"}'
    )


def test_validation_errors_are_flattened_to_dotted_fields():
    exc = exceptions.ValidationError({"spec": {"train": {"steps": ["must be > 0"]}}, "x": ["no"]})
    body = exception_handler(exc, {}).data
    assert body["code"] == "invalid" and body["field"] == "spec.train.steps"
    assert body["errors"] == [
        {"field": "spec.train.steps", "message": "must be > 0"},
        {"field": "x", "message": "no"},
    ]


def test_a_domain_error_takes_only_a_catalogued_code():
    with pytest.raises(ValueError):
        DomainError("no_such_code", "…")
