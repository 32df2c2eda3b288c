from base64 import b64decode
from urllib.parse import parse_qs

from rest_framework.pagination import CursorPagination

from paddock.api.base import MAX_ID
from paddock.core.errors import DomainError, ErrorCode


def _bad_cursor() -> DomainError:
    return DomainError(
        ErrorCode.INVALID_CURSOR,
        "the cursor is malformed; use a `next` link as given",
        field="cursor",
    )


def _digits(value: str, most: int) -> bool:
    return value.isascii() and value.isdigit() and len(value) <= len(str(most))


class NewestFirst(CursorPagination):
    """Opaque cursors over ids, newest first: stable while rows are added meanwhile.

    A cursor comes back from the client, so it is checked like any other input before DRF
    decodes it: DRF handed its position to the query unchecked (`p=abc` was a 500 when the
    database compared it with an id), read anything base64 would skip as an empty cursor,
    and answered a malformed one with 404. Here each part must be what this class writes:
    `o` an offset up to DRF's cutoff, `r` 0 or 1, `p` an id."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200

    def decode_cursor(self, request):
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded:
            _check(encoded, self.offset_cutoff)
        return super().decode_cursor(request)


def _check(encoded: str, offset_cutoff: int) -> None:
    try:
        text = b64decode(encoded.encode("ascii"), validate=True).decode("ascii")
        tokens = parse_qs(text, keep_blank_values=True, strict_parsing=True)
    except (ValueError, UnicodeError):
        raise _bad_cursor() from None
    if not set(tokens) <= {"o", "r", "p"} or any(len(v) != 1 for v in tokens.values()):
        raise _bad_cursor()
    offset, reverse, position = (tokens.get(k, [None])[0] for k in ("o", "r", "p"))
    if offset is not None and not (_digits(offset, offset_cutoff) and int(offset) <= offset_cutoff):
        raise _bad_cursor()
    if reverse is not None and reverse not in ("0", "1"):
        raise _bad_cursor()
    if position is not None and not (_digits(position, MAX_ID) and int(position) <= MAX_ID):
        raise _bad_cursor()
