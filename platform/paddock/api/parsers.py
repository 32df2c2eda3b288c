"""The JSON parser of every API body: core/jsonbody.py's limits, refused as a 400 in the
API's error shape (`{"code": "invalid_json", "message", "field"}`) instead of DRF's
parse of plain `json.loads`, whose RecursionError on deep nesting was a 500."""

from __future__ import annotations

from django.conf import settings
from rest_framework.parsers import JSONParser

from paddock.core.errors import DomainError, ErrorCode
from paddock.core.jsonbody import JsonBodyError, json_parse


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        # at most one byte past the limit: DRF hands the raw stream over, which Django's own
        # limit (on request.body) does not guard
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise DomainError(
                ErrorCode.BODY_TOO_LARGE, f"the body is larger than {limit // 2**20} MiB"
            )
        try:
            return json_parse(raw)
        except JsonBodyError as exc:
            raise DomainError(ErrorCode.INVALID_JSON, _sentence(exc), field=exc.field) from None


def _sentence(exc: JsonBodyError) -> str:
    return f"{exc.field}: {exc.message}" if exc.field else exc.message
