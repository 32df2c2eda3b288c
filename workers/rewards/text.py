"""Pure text helpers of the verifiers: the last \\boxed{…}, the final number, normalization."""

from __future__ import annotations

import re
from fractions import Fraction

# 1,234.5 · -3 · .5 · 1e-3; a comma is a thousands separator only before three digits
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


def numbers(text: str) -> list[str]:
    """The numbers of `text` in order, thousands separators removed."""
    out = []
    for m in _NUMBER.finditer(text):
        s = m.group()
        if any(c.isdigit() for c in s):
            out.append(s.replace(",", ""))
    return out


def final_number(text: str) -> str | None:
    found = numbers(text)
    return found[-1] if found else None


def to_number(text: str) -> float | None:
    """A float for `42`, `-1,234.5`, `3/4`, `$5`, `12%`... else None."""
    s = text.strip().strip("$").replace(",", "").replace(" ", "").rstrip(".")
    s = s.removesuffix("\\%").removesuffix("%")
    if not s:
        return None
    try:
        return float(Fraction(s)) if "/" in s else float(s)
    except (ValueError, ZeroDivisionError):
        return None


def last_boxed(text: str) -> str | None:
    """Contents of the last \\boxed{…} (or \\fbox{…}) of `text`, nested braces kept;
    None when there is none or its braces never close."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    for start in reversed(starts):
        depth = 1
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i]
    return None


def gsm8k_gold(answer: str) -> str:
    """GSM8K's answer field is the worked solution, then `#### 42`; the gold is what
    follows the last `####` (the whole answer when there is none)."""
    return answer.rpartition("####")[2].strip()  # all of it when there is no ####


def normalize_math(text: str) -> str:
    """Light normalization for comparing short answers as text: no $…$, spacing,
    \\left/\\right, \\dfrac/\\tfrac, or a trailing period."""
    s = text.strip().strip("$").strip()
    s = re.sub(r"\\(?:left|right)(?=[()\[\]|.\\])", "", s)
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\\[,;!: ]|~", "", s)
    s = re.sub(r"\s+", "", s)
    return s.rstrip(".")


_FRAC = re.compile(r"^(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}$")


def math_number(text: str) -> float | None:
    """A number for plain numbers and for \\frac{a}{b} with integer a, b."""
    s = normalize_math(text)
    m = _FRAC.match(s)
    if m:
        sign, a, b = m.groups()
        if int(b) == 0:
            return None
        return (-1 if sign else 1) * int(a) / int(b)
    return to_number(s)
