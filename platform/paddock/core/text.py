"""What a name, a description or a tag may hold: any printable text, no control characters.

One rule for every such field (the API's serializers use it), because a control character
in a name is never meant: a NUL is refused by PostgreSQL (a server error), an escape
sequence rewrites the terminal of whoever lists experiments with the CLI, a carriage
return forges lines in a log, and the bidirectional overrides (U+202A-U+202E, U+2066-
U+2069) make a name read differently from what it is ("Trojan Source")."""

from __future__ import annotations

import unicodedata

BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
LINE_BREAKS = frozenset("\n\t")  # what a multi-line text (a description) may use
SEPARATORS = frozenset("\u2028\u2029")  # line and paragraph separators: line breaks in disguise


def text_problem(value: str, *, multiline: bool = False) -> str | None:
    """Why `value` is refused as a name (or, `multiline`, as a description); None if fine."""
    for i, ch in enumerate(value):
        if multiline and ch in LINE_BREAKS:
            continue
        if unicodedata.category(ch) in ("Cc", "Cs") or ch in BIDI_CONTROLS or ch in SEPARATORS:
            return f"must not contain control characters (U+{ord(ch):04X} at position {i})"
    return None
