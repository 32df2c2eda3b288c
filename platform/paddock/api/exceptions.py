"""The one exception handler: every error of the API is `{"code", "message", "field"}`
(plus `errors`, every problem, when there are several), its code one of `ErrorCode`'s:
a `DomainError` as it is, DRF's own exceptions (authentication, permission, method, media
type) under their DRF code, throttling as `rate_limited`, validation errors flattened to
dotted fields."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from paddock.core.errors import DomainError, ErrorCode, error_body


def _flatten(detail, prefix: str, out: list[dict]) -> list[dict]:
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = "" if key in ("non_field_errors", "detail") else str(key)
            _flatten(value, f"{prefix}.{name}" if prefix and name else prefix or name, out)
    elif isinstance(detail, list):
        if all(isinstance(d, str) for d in detail):
            out += [{"field": prefix or None, "message": str(d)} for d in detail]
        else:
            for i, d in enumerate(detail):
                _flatten(d, f"{prefix}[{i}]" if prefix else f"[{i}]", out)
    else:
        out.append({"field": prefix or None, "message": str(detail)})
    return out


def exception_handler(exc, context):
    if isinstance(exc, DomainError):
        return Response(exc.as_dict(), status=exc.status)
    if isinstance(exc, RequestDataTooBig):  # Django's DATA_UPLOAD_MAX_MEMORY_SIZE, read by DRF
        message = f"the body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 2**20} MiB"
        code = ErrorCode.BODY_TOO_LARGE
        return Response(error_body(code, message), status=code.status)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # a bug: let it be a 500 and reach the logs
    if isinstance(exc, exceptions.ValidationError):
        errors = _flatten(exc.detail, "", [])
        first = errors[0] if errors else {"field": None, "message": "invalid input"}
        body = error_body(ErrorCode.INVALID, first["message"], first["field"])
        if len(errors) > 1:
            body["errors"] = [{"field": e["field"], "message": e["message"]} for e in errors]
        response.data = body
        return response
    response.data = error_body(_code(exc), str(exc.detail))
    return response


# DRF's own codes the catalogue names otherwise: throttling is the one 429, `rate_limited`
RENAMED = {exceptions.Throttled.default_code: ErrorCode.RATE_LIMITED.value}


def _code(exc: exceptions.APIException) -> ErrorCode:
    """DRF's code for its exception (`not_authenticated`, `method_not_allowed`, …) or the one
    a view gave it; a code outside the catalogue is a bug, answered as `error`."""
    codes = exc.get_codes()
    codes = RENAMED.get(codes, codes) if isinstance(codes, str) else codes
    known = isinstance(codes, str) and codes in ErrorCode._value2member_map_
    return ErrorCode(codes) if known else ErrorCode.ERROR
