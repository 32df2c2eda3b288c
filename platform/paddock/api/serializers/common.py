"""What the serializers of every domain share: ids, names and descriptions as fields, the
error body, a user in brief."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import serializers

from paddock.core.text import text_problem

MAX_ID = 2**63 - 1
Id = lambda **kw: serializers.IntegerField(min_value=1, max_value=MAX_ID, **kw)  # noqa: E731


def _plain_text(multiline: bool):
    def check(value: str) -> None:
        problem = text_problem(value, multiline=multiline)
        if problem:
            raise serializers.ValidationError(problem, code="control_character")

    return check


def Name(**kw) -> serializers.CharField:  # noqa: N802  (a field, spelled like one)
    """A name or a tag: printable text on one line (core/text.py)."""
    return serializers.CharField(validators=[_plain_text(False)], **kw)


def Description(**kw) -> serializers.CharField:  # noqa: N802
    """Multi-line text: line breaks and tabs, no other control characters."""
    return serializers.CharField(validators=[_plain_text(True)], **kw)


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    field = serializers.CharField(allow_null=True)
    errors = serializers.ListField(child=serializers.DictField(), required=False)


class UserBriefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()


def datetime_text(value, zone) -> str | None:
    """A datetime as DRF's DateTimeField writes it (ISO 8601 in `zone`, UTC as `Z`), for the
    answers built by hand (`run_rows`): `zone` is timezone.get_current_timezone(), read
    once per answer."""
    if not value:
        return None
    if timezone.is_aware(value):
        value = value.astimezone(zone)
    else:
        value = timezone.make_aware(value, zone)
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text
