"""Options that several verbs share, defined once so they read the same everywhere."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer


class Format(StrEnum):
    table = "table"
    json = "json"


OutputOpt = Annotated[Format, typer.Option("--output", "-o", help="table or json")]
LimitOpt = Annotated[int, typer.Option("--limit", "-n", help="at most this many")]
TeamOpt = Annotated[str | None, typer.Option(help="team slug or id (default: your only team)")]
BackendsOpt = Annotated[
    str | None, typer.Option(help="comma-separated rollout backends, e.g. torch,vllm")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="KEY.PATH=VALUE", help="override a spec field (repeatable)"),
]
