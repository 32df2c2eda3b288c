"""A step's episode metrics and the inspector's view of an episode, from the records the
episodes leave on their scored groups (episode.py's `episode_record`). Pure functions."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from ..names import EPISODE_METRICS

_TEXT_MAX = 2000  # characters of one turn kept for the inspector


def episode_metrics(episodes: Sequence[dict[str, Any]]) -> dict[str, float]:
    """`episode/*` over a step's episodes; empty for one-turn samples (no records)."""
    if not episodes:
        return {}
    env_s = sum(e["env_s"] for e in episodes)
    wall_s = sum(e["wall_s"] for e in episodes)
    out = {
        "episode/turns_mean": statistics.fmean(e["model_turns"] for e in episodes),
        "episode/tool_calls": float(sum(e["tool_calls"] for e in episodes)),
        "episode/tool_errors": float(sum(e["tool_errors"] for e in episodes)),
        "episode/env_s": env_s,
        "episode/env_share": env_s / wall_s if wall_s > 0 else 0.0,
        "episode/truncated_frac": statistics.fmean(e["finish"] == "truncated" for e in episodes),
        "episode/failed": float(sum(e["finish"] == "failed" for e in episodes)),
    }
    assert set(out) == set(EPISODE_METRICS)  # names defined once, in workers/names.py
    return out


def _short(text: str) -> str:
    return text if len(text) <= _TEXT_MAX else text[:_TEXT_MAX] + "…"


def episode_turns(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The episode as the inspector shows it, turn by turn: who spoke (model, or the
    environment's roles: tool, user, env), the text, how many tokens, whether they were
    masked out of the loss, and each model turn's adapter version."""
    out: list[dict[str, Any]] = []
    for t in record["turns"]:
        tokens = t["end"] - t["start"]
        if t["role"] == "model":
            out.append(
                {
                    "role": "model", "text": _short(t["text"]), "tokens": tokens,
                    "masked": record["finish"] == "failed",
                    "adapter_version": t["adapter_version"],
                    "adapter_versions": t["adapter_versions"],
                }
            )  # fmt: skip
            continue
        for m in t["messages"]:
            content = m.get("content")
            out.append(
                {
                    "role": m.get("role", "env"),
                    "name": m.get("name"),
                    "text": _short(content if isinstance(content, str) else str(content)),
                    "tokens": tokens,  # the whole answer's, rendered with its template
                    "masked": True,
                }
            )
            tokens = 0
    if record.get("error"):
        out.append({"role": "env", "text": _short(f"failed: {record['error']}"), "masked": True})
    return out
