"""The child process behind the math_verify term: one JSON request a line on stdin, one JSON
reply a line on stdout.

Why a process: math-verify bounds its own time with signal.alarm, which only works on the
main thread of a process (the job's event loop may run on another), and sympy can still get
stuck in C code that no signal interrupts; the parent kills this process then. It also keeps
sympy's work off the interpreter that drives training.

Run as `python -P <this file>` (no package imports, so it starts fast); request
`{"gold": str, "pred": str, "timeout": int}`, reply `{"score": 0|1, "gold": str, "pred": str}`
or `{"score": 0, "error": str}`.
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict

_SHOW = 200


def _show(parsed: list) -> str:
    s = str(parsed[0]) if parsed else ""
    return s if len(s) <= _SHOW else s[:_SHOW] + "…"


def main() -> None:
    # stdout carries the replies alone: whatever a library prints goes to stderr
    out, sys.stdout = sys.stdout, sys.stderr
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    # the completion: a \boxed{} answer first, then any LaTeX or plain expression
    pred_config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    golds: OrderedDict[tuple[str, int], list] = OrderedDict()  # a group shares one gold

    def gold_of(text: str, timeout: int) -> list:
        key = (text, timeout)
        if key not in golds:
            parsed = parse(text, parsing_timeout=timeout)
            if not parsed and "$" not in text:
                parsed = parse(f"${text}$", parsing_timeout=timeout)
            golds[key] = parsed
            if len(golds) > 1024:
                golds.popitem(last=False)
        return golds[key]

    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            req = json.loads(line)
            timeout = int(req["timeout"])
            gold = gold_of(str(req["gold"]), timeout)
            pred = parse(str(req["pred"]), extraction_config=pred_config, parsing_timeout=timeout)
            if not gold:
                reply = {"score": 0, "error": "gold answer not parseable", "pred": _show(pred)}
            elif not pred:
                reply = {"score": 0, "gold": _show(gold), "pred": ""}
            else:
                ok = verify(gold, pred, timeout_seconds=timeout)
                reply = {"score": int(ok), "gold": _show(gold), "pred": _show(pred)}
        except Exception as exc:  # one bad sample scores 0, with the reason
            reply = {"score": 0, "error": f"{type(exc).__name__}: {exc}"[:_SHOW]}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
