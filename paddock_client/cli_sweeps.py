"""The `paddock sweeps` verbs: launch a grid or random search over a spec's keys, list,
show (every member with its settings and metric), stop (docs/sweeps.md)."""

from __future__ import annotations

import itertools
import json
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from paddock_client.client import PaddockClient
from paddock_client.options import Format, LimitOpt, OutputOpt, SetOpt, TeamOpt
from paddock_client.output import err, field, show_list, show_one

SweepId = Annotated[int, typer.Argument(help="sweep id")]
RANGE = re.compile(r"^(?P<flags>(?:(?:log|int):)*)(?P<low>[^.:][^:]*?)\.\.(?P<high>[^.].*)$")
SWEEP_COLUMNS = [
    ("ID", field("id")), ("NAME", field("name")), ("STATE", field("state")),
    ("METHOD", field("method")), ("MEMBERS", field("budget", "members")),
    ("ACTIVE", field("counts", "active")), ("STOPPED", field("counts", "stopped")),
    ("DONE", field("counts", "done")), ("METRIC", field("metric")),
    ("EXPERIMENT", field("experiment")),
]  # fmt: skip
SWEEP_KEYS = ["id", "name", "state", "end_reason", "method", "params", "metric", "mode",
              "stopping", "budget", "gpu_hours", "parallel", "experiment", "counts",
              "created_at", "finished_at"]  # fmt: skip


class Method(StrEnum):
    grid = "grid"
    random = "random"


class Mode(StrEnum):
    max = "max"
    min = "min"


class Rule(StrEnum):
    median = "median"
    threshold = "threshold"


def _client() -> PaddockClient:
    return PaddockClient.from_environment()


def _scalar(text: str) -> Any:
    """A value as JSON reads it (8, 1e-3, true, null), else the text itself (grpo)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _number(text: str, name: str) -> float:
    value = _scalar(text)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise typer.BadParameter(f"{name}: {text!r} is not a number", param_hint="--param")
    return value


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """--param KEY=V1,V2,… (values) or KEY=[log:][int:]MIN..MAX (a range, random search)
    as the sweep's `params`."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise typer.BadParameter(f"{pair!r}: expected KEY=V1,V2 or KEY=MIN..MAX",
                                     param_hint="--param")  # fmt: skip
        if key in params:
            raise typer.BadParameter(f"{key} given twice", param_hint="--param")
        match = RANGE.match(text.strip())
        if match:
            flags = match["flags"].split(":")
            params[key] = {"min": _number(match["low"], key), "max": _number(match["high"], key),
                           "log": "log" in flags, "int": "int" in flags}  # fmt: skip
        else:
            params[key] = [_scalar(v.strip()) for v in text.split(",")]
    return params


def _early_stopping(rule: Rule | None, min_steps: int | None, min_members: int | None,
                    threshold: float | None) -> dict | None:  # fmt: skip
    if rule is None:
        if min_steps is not None or min_members is not None or threshold is not None:
            raise typer.BadParameter("give --stop too", param_hint="--stop")
        return None
    if min_steps is None:
        raise typer.BadParameter("--stop needs --min-steps", param_hint="--min-steps")
    out: dict[str, Any] = {"rule": str(rule), "min_steps": min_steps}
    if min_members is not None:
        out["min_members"] = min_members
    if threshold is not None:
        out["threshold"] = threshold
    return out


sweeps = typer.Typer(no_args_is_help=True, help="Grid and random searches over spec keys.")


@sweeps.command("launch")
def sweeps_launch(
    spec: Annotated[Path, typer.Argument(help="the base run spec, YAML or JSON")],
    param: Annotated[list[str], typer.Option(
        "--param", "-p", metavar="KEY=V1,V2|KEY=[log:][int:]MIN..MAX",
        help="a spec key to search and its values, or (random) its range; repeatable")],
    method: Annotated[Method, typer.Option(help="grid: every combination; random: draws")]
    = Method.grid,
    members: Annotated[int | None, typer.Option(
        help="members: a random search's draws; a grid's at least its size")] = None,
    gpu_hours: Annotated[float | None, typer.Option(
        help="stop once the members' runs counted for this many GPU-hours")] = None,
    parallel: Annotated[int | None, typer.Option(
        help="members running at once (default: what one pool hosts)")] = None,
    metric: Annotated[str, typer.Option(help="the objective: best member, stopping")]
    = "reward/mean",
    mode: Annotated[Mode, typer.Option(help="max or min of the metric is best")] = Mode.max,
    stop: Annotated[Rule | None, typer.Option(help="early stopping: median or threshold")]
    = None,
    min_steps: Annotated[int | None, typer.Option(help="no member stops before this step")]
    = None,
    min_members: Annotated[int | None, typer.Option(
        help="median: others that must have reached the step compared at (3)")] = None,
    threshold: Annotated[float | None, typer.Option(help="threshold: the value to reach")]
    = None,
    seed: Annotated[int | None, typer.Option(help="random: the draws' seed")] = None,
    team: TeamOpt = None,
    name: Annotated[str | None, typer.Option(help="default: the file's name")] = None,
    tag: Annotated[list[str] | None, typer.Option(help="a tag (repeatable)")] = None,
    set_: SetOpt = None,
    cluster: Annotated[int | None, typer.Option(help="cluster id (default: placed)")] = None,
    validate_only: Annotated[bool, typer.Option(help="check every member, create nothing")]
    = False,
) -> None:  # fmt: skip
    """Launch a sweep: every member checked, then run `parallel` at a time in a pool."""
    import yaml

    from workers.spec import apply_overrides  # pydantic and PyYAML only

    data = apply_overrides(yaml.safe_load(spec.read_text()) or {}, set_ or [])
    budget = {k: v for k, v in {"members": members, "gpu_hours": gpu_hours}.items()
              if v is not None}  # fmt: skip
    reply = _client().sweep_create(
        team=team, name=name or spec.stem, spec=data, method=str(method),
        params=parse_params(param), budget=budget, parallel=parallel, metric=metric,
        mode=str(mode), early_stopping=_early_stopping(stop, min_steps, min_members, threshold),
        seed=seed, tags=tag or [], cluster=cluster, validate_only=validate_only,
    )  # fmt: skip
    if "valid" in reply:
        for error in reply["errors"]:
            err(f"{spec}: {error['field']}: {error['message']}")
        if not reply["valid"]:
            raise typer.Exit(1)
        print(f"valid: {len(reply['members'])} member(s), {reply['parallel']} at once")
        return
    print(f"sweep {reply['id']} '{reply['name']}' (experiment {reply['experiment']}): "
          f"{reply['budget']['members']} members, {reply['parallel']} at once")  # fmt: skip
    _members_table(reply, Format.table)


@sweeps.command("list")
def sweeps_list(team: TeamOpt = None, limit: LimitOpt = 50,
                output: OutputOpt = Format.table) -> None:  # fmt: skip
    """Sweeps, newest first."""
    client = _client()
    found = client.sweeps(team=client.team_id(team) if team else None)
    show_list(list(itertools.islice(found, limit)), SWEEP_COLUMNS, output)


def _members_table(sweep: dict, output: Format) -> None:
    keys = list(sweep["params"])
    columns = [("#", field("index")), ("STATE", field("state"))]
    columns += [(key.upper(), field("settings", key)) for key in keys]
    columns += [("RUN", field("run", "id")), ("STEP", field("run", "step")),
                (f"BEST {sweep['metric']}", lambda m: ("★ " if m["is_best"] else "")
                 + ("" if m["best"] is None else f"{m['best']:.4g}")),
                ("REASON", field("reason"))]  # fmt: skip
    show_list(sweep["members"], columns, output)


@sweeps.command("get")
def sweeps_get(sweep_id: SweepId, output: OutputOpt = Format.table) -> None:
    """One sweep and every member: its settings, its run, its best value (★ the best)."""
    sweep = _client().sweep(sweep_id)
    if output is Format.json:
        show_one(sweep, output)
        return
    show_one(sweep, output, SWEEP_KEYS)
    _members_table(sweep, output)


@sweeps.command("stop")
def sweeps_stop(sweep_id: SweepId) -> None:
    """Stop a sweep: no member starts any more, each running one is paused then aborted."""
    sweep = _client().sweep_stop(sweep_id)
    print(f"sweep {sweep['id']}: {sweep['state']} ({sweep['end_reason']})")


def register(app: typer.Typer) -> None:
    app.add_typer(sweeps, name="sweeps")
    app.add_typer(sweeps, name="sweep", hidden=True)  # as people also say it
