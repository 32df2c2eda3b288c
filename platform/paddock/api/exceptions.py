"""The one exception handler: every error of the API is `{"code", "message", "field"}`
(plus `errors`, every problem, when there are several), with a stable machine code."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from paddock.api.errors import DomainError


def _flatten(detail, prefix: str, out: list[dict]) -> list[dict]:
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = "" if key in ("non_field_errors", "detail") else str(key)
            _flatten(value, f"{prefix}.{name}" if prefix and name else prefix or name, out)
    elif isinstance(detail, list):
        if all(isinstance(d, str) for d in detail):
            for d in detail:
                out.append({"field": prefix or None, "message": str(d),
                            "code": getattr(d, "code", "invalid")})  # fmt: skip
        else:
            for i, d in enumerate(detail):
                _flatten(d, f"{prefix}[{i}]" if prefix else f"[{i}]", out)
    else:
        out.append(
            {"field": prefix or None, "message": str(detail), "code": getattr(detail, "code", "")}
        )
    return out


def exception_handler(exc, context):
    if isinstance(exc, DomainError):
        return Response(exc.as_dict(), status=exc.status)
    if isinstance(exc, RequestDataTooBig):  # Django's DATA_UPLOAD_MAX_MEMORY_SIZE, read by DRF
        message = f"the body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 2**20} MiB"
        return Response({"code": "body_too_large", "message": message, "field": None}, status=413)
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
        body = {"code": "invalid", "message": first["message"], "field": first["field"]}
        if len(errors) > 1:
            body["errors"] = [{"field": e["field"], "message": e["message"]} for e in errors]
        response.data = body
        return response
    codes = exc.get_codes()
    code = codes if isinstance(codes, str) else "error"
    response.data = {"code": code, "message": str(exc.detail), "field": None}
    return response
