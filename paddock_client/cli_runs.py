"""The verbs of experiments, runs and their checkpoints, against the REST API."""

from __future__ import annotations

import itertools
import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from paddock_client.client import PaddockClient
from paddock_client.options import BackendsOpt, Format, LimitOpt, OutputOpt, SetOpt, TeamOpt
from paddock_client.output import err, field, progress_bar, show_list, show_one
from workers.names import RUN_STATES, TERMINAL_RUN_STATES

RunId = Annotated[int, typer.Argument(help="run id")]
# `--active`: every state of a run that has not finished (queued, dispatching, starting,
# running, pausing, paused, resuming, aborting), in the state machine's order
ACTIVE_STATES = [s for s in RUN_STATES if s not in TERMINAL_RUN_STATES]


class ExportFormat(StrEnum):
    csv = "csv"
    parquet = "parquet"


EXPERIMENT_COLUMNS = [
    ("ID", field("id")), ("TEAM", field("team_slug")), ("NAME", field("name")),
    ("RUNS", field("run_count")), ("ACTIVE", field("active_run_count")),
    ("CONFIG", field("config")), ("CREATED", field("created_at")),
]  # fmt: skip
RUN_COLUMNS = [
    ("ID", field("id")), ("STATE", field("state")), ("BACKEND", field("backend")),
    ("SEED", field("seed")), ("STEP", lambda r: f"{r['step']}/{r['total_steps']}"),
    ("EXPERIMENT", field("experiment_name")), ("REASON", field("queued_reason")),
]  # fmt: skip
RUN_KEYS = ["id", "experiment", "experiment_name", "backend", "seed", "state",
            "desired_state", "queued_reason", "error", "step", "total_steps", "cluster_name",
            "latest", "created_at", "started_at", "finished_at"]  # fmt: skip
CHECKPOINT_COLUMNS = [
    ("ID", field("id")), ("STEP", field("step")), ("ADAPTER", field("adapter_version")),
    ("BYTES", field("size_bytes")), ("CREATED", field("created_at")), ("URI", field("uri")),
]  # fmt: skip


def _client() -> PaddockClient:
    return PaddockClient.from_environment()


def _backends(text: str | None) -> list[str] | None:
    return [b.strip() for b in text.split(",") if b.strip()] if text else None


def _edits(pairs: list[str] | None) -> dict:
    """--set a.b=value pairs as the clone body's edits; values read as YAML scalars."""
    import yaml

    edits = {}
    for pair in pairs or []:
        path, sep, value = pair.partition("=")
        if not sep or not path:
            raise typer.BadParameter(f"{pair!r}: expected KEY.PATH=VALUE", param_hint="--set")
        edits[path.strip()] = yaml.safe_load(value)
    return edits


def _launched(reply: dict, source: str) -> None:
    if "valid" in reply:  # validate_only
        for error in reply["errors"]:
            err(f"{source}: {error['field']}: {error['message']}")
        if reply["valid"]:
            print(f"valid: {len(reply['runs'])} run(s) would start")
            return
        raise typer.Exit(1)
    experiment = reply["experiment"]
    print(f"experiment {experiment['id']} '{experiment['name']}':")
    for run in reply["runs"]:
        print(f"  run {run['id']}  {run['backend']:<7} seed {run['seed']}  {run['state']}")


# --- experiments ------------------------------------------------------------------------------

experiments = typer.Typer(no_args_is_help=True, help="Launch, list, clone and compare.")


@experiments.command("list")
def experiments_list(
    team: TeamOpt = None,
    tag: Annotated[str | None, typer.Option()] = None,
    creator: Annotated[str | None, typer.Option(help="username")] = None,
    search: Annotated[str | None, typer.Option(help="in the name and description")] = None,
    limit: LimitOpt = 50,
    output: OutputOpt = Format.table,
) -> None:
    """Experiments, newest first."""
    client = _client()
    team_id = client.team_id(team) if team else None
    found = client.experiments(team=team_id, tag=tag, creator=creator, search=search)
    show_list(list(itertools.islice(found, limit)), EXPERIMENT_COLUMNS, output)


@experiments.command("get")
def experiments_get(
    experiment_id: Annotated[int, typer.Argument(help="experiment id")],
    output: OutputOpt = Format.table,
) -> None:
    """One experiment."""
    show_one(_client().experiment(experiment_id), output)


@experiments.command("launch")
def experiments_launch(
    spec: Annotated[Path, typer.Argument(help="a run spec, YAML or JSON")],
    backends: BackendsOpt = None,
    seeds: Annotated[int, typer.Option(help="runs per backend (seed, seed+1, …)")] = 1,
    team: TeamOpt = None,
    name: Annotated[str | None, typer.Option(help="default: the file's name")] = None,
    tag: Annotated[list[str] | None, typer.Option(help="a tag (repeatable)")] = None,
    set_: SetOpt = None,
    cluster: Annotated[int | None, typer.Option(help="cluster id (default: placed)")] = None,
    validate_only: Annotated[bool, typer.Option(help="check, create nothing")] = False,
    preflight: Annotated[
        bool, typer.Option(help="a pre-flight check on each backend first: the runs wait for it")
    ] = False,
) -> None:
    """Launch a spec: one experiment, a queued run per backend × seed."""
    import yaml

    from workers.spec import apply_overrides  # pydantic and PyYAML only

    data = apply_overrides(yaml.safe_load(spec.read_text()) or {}, set_ or [])
    reply = _client().launch(
        team=team, name=name or spec.stem, spec=data, backends=_backends(backends),
        seeds=seeds, tags=tag or [], cluster=cluster, validate_only=validate_only,
        preflight="first" if preflight else "off",
    )  # fmt: skip
    _launched(reply, str(spec))


def preflight_lines(body: dict) -> list[str]:
    """An experiment's pre-flight check for people: its state, each engine's checks."""
    lines = [f"pre-flight: {body['state'] or 'not asked for'}"]
    for run in body["runs"]:
        lines.append(f"  {run['backend']} (run {run['run_id']}, {run['state']})")  # fmt: skip
        for c in (run["verdict"] or {}).get("checks", []):
            lines.append(f"    {c['status'].upper():7} {c['name']}: {c['figure'] or c['message']}")
            if c["status"] != "pass" and c["message"] and c["figure"]:
                lines.append(f"            {c['message']}")
    return lines


@experiments.command("preflight")
def experiments_preflight(
    experiment_id: Annotated[int, typer.Argument(help="experiment id")],
    override: Annotated[
        bool, typer.Option(help="launch the runs it holds although it failed (audited)")
    ] = False,
    output: OutputOpt = Format.table,
) -> None:
    """The experiment's pre-flight check; exit 1 while it holds the runs (failed, pending)."""
    client = _client()
    body = client.preflight_override(experiment_id) if override else client.preflight(experiment_id)
    if output == Format.json:
        print(json.dumps(body, indent=2))
    else:
        print("\n".join(preflight_lines(body)))
    raise typer.Exit(1 if body["state"] in ("pending", "failed") else 0)


@experiments.command("clone")
def experiments_clone(
    experiment_id: Annotated[int, typer.Argument(help="experiment to copy")],
    set_: SetOpt = None,
    name: Annotated[str | None, typer.Option(help="default: the original's, marked")] = None,
    backends: BackendsOpt = None,
    seeds: Annotated[int | None, typer.Option(help="default: the original's")] = None,
    config: Annotated[int | None, typer.Option(help="clone this config version")] = None,
    validate_only: Annotated[bool, typer.Option(help="check, create nothing")] = False,
) -> None:
    """Launch a copy of an experiment, with edits."""
    reply = _client().clone(
        experiment_id, edits=_edits(set_), name=name, backends=_backends(backends),
        seeds=seeds, config=config, validate_only=validate_only,
    )  # fmt: skip
    _launched(reply, f"experiment {experiment_id}")


@experiments.command("diff")
def experiments_diff(
    a: Annotated[int, typer.Argument(help="experiment id (or config id with --configs)")],
    b: Annotated[int, typer.Argument(help="experiment id (or config id with --configs)")],
    configs: Annotated[bool, typer.Option(help="A and B are config version ids")] = False,
    output: OutputOpt = Format.table,
) -> None:
    """What differs between two experiments' specs (dotted paths)."""
    client = _client()
    if not configs:
        a, b = client.experiment(a)["config"], client.experiment(b)["config"]
    changes = client.diff(a, b)
    columns = [("PATH", field("path")), ("A", field("a")), ("B", field("b"))]
    show_list(changes, columns, output)


# --- runs -------------------------------------------------------------------------------------

runs = typer.Typer(no_args_is_help=True, help="List, watch, control and export runs.")


@runs.command("list")
def runs_list(
    state: Annotated[str | None, typer.Option(
        help="exactly these states, one or several: queued,running (a run in starting, "
        "dispatching, pausing... is not running; --active for every unfinished one)")]
    = None,
    active: Annotated[bool, typer.Option(
        "--active", help=f"every run not finished: {','.join(ACTIVE_STATES)}")] = False,
    backend: Annotated[str | None, typer.Option()] = None,
    tag: Annotated[str | None, typer.Option()] = None,
    creator: Annotated[str | None, typer.Option(help="username")] = None,
    experiment: Annotated[int | None, typer.Option(help="experiment id")] = None,
    team: TeamOpt = None,
    limit: LimitOpt = 50,
    output: OutputOpt = Format.table,
) -> None:  # fmt: skip
    """Runs, newest first."""
    if active and state:
        raise typer.BadParameter("give --state or --active, not both", param_hint="--active")
    if active:
        state = ",".join(ACTIVE_STATES)
    client = _client()
    found = client.runs(
        state=state, backend=backend, tag=tag, creator=creator, experiment=experiment,
        team=client.team_id(team) if team else None,
    )  # fmt: skip
    show_list(list(itertools.islice(found, limit)), RUN_COLUMNS, output)


@runs.command("get")
def runs_get(run_id: RunId, output: OutputOpt = Format.table) -> None:
    """One run: state, progress and its latest metrics."""
    run = _client().run(run_id)
    show_one(run, output, None if output is Format.json else RUN_KEYS)


def _control(verb: str, run_id: int) -> None:
    run = getattr(_client(), verb)(run_id)
    print(f"run {run['id']}: {run['state']} (desired: {run['desired_state']})")


@runs.command("pause")
def runs_pause(run_id: RunId) -> None:
    """Pause a run (it checkpoints; resume continues from there)."""
    _control("pause", run_id)


@runs.command("resume")
def runs_resume(run_id: RunId) -> None:
    """Resume a paused run."""
    _control("resume", run_id)


@runs.command("abort")
def runs_abort(run_id: RunId) -> None:
    """Abort a run."""
    _control("abort", run_id)


@runs.command("logs")
def runs_logs(
    run_id: RunId,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="until the run ends")] = False,
    output: OutputOpt = Format.table,
) -> None:
    """A run's log and status events, oldest first."""
    import json

    for event in _client().follow_events(run_id, follow=follow):
        if output is Format.json:  # one object a line: follows well through a pipe
            print(json.dumps(event), flush=True)
        else:
            print(
                f"{event['time']}  {event['level']:<7} {event['kind']:<6} {event['message']}",
                flush=True,
            )


def _summary(series: dict) -> dict:
    ys = [y for y in series["y"] if y is not None]
    return {
        "key": series["key"], "points": series["count"] or len(ys),
        "last_step": series["step"][-1] if series["step"] else None,
        "last": ys[-1] if ys else None, "min": min(ys, default=None), "max": max(ys, default=None),
    }  # fmt: skip


@runs.command("metrics")
def runs_metrics(
    run_id: RunId,
    keys: Annotated[str | None, typer.Option(help="comma-separated (default: all)")] = None,
    max_points: Annotated[int, typer.Option(help="per series, downsampled on the server")]
    = 1000,
    output: OutputOpt = Format.table,
) -> None:  # fmt: skip
    """A run's metric series: a summary per key, or with -o json the (downsampled)
    series. `runs export` has every point."""
    reply = _client().metrics(run_id, keys.split(",") if keys else None, max_points=max_points)
    if output is Format.json:
        show_one(reply, output)
        return
    columns = [(h.upper(), field(h)) for h in ("key", "points", "last_step", "last", "min", "max")]
    show_list([_summary(s) for s in reply["series"]], columns, output)


@runs.command("export")
def runs_export(
    run_id: RunId,
    out: Annotated[Path, typer.Option("--out", "-o", help="the file to write")],
    format: Annotated[ExportFormat, typer.Option("--format")] = ExportFormat.csv,
    keys: Annotated[str | None, typer.Option(help="comma-separated (default: all)")] = None,
) -> None:
    """Every stored metric point of a run (full resolution) as CSV or Parquet: columns
    step, key, value, time."""
    with progress_bar(f"run {run_id}") as progress:
        _client().export_metrics(
            run_id, out, format=format.value, keys=keys.split(",") if keys else None,
            progress=progress,
        )  # fmt: skip
    print(f"wrote {out}")


# --- checkpoints ------------------------------------------------------------------------------

checkpoints = typer.Typer(no_args_is_help=True, help="A run's checkpoints and their adapters.")


@checkpoints.command("list")
def checkpoints_list(run_id: RunId, output: OutputOpt = Format.table) -> None:
    """A run's checkpoints."""
    show_list(_client().checkpoints(run_id), CHECKPOINT_COLUMNS, output)


@checkpoints.command("download")
def checkpoints_download(
    run_id: RunId,
    checkpoint: Annotated[int | None, typer.Argument(help="checkpoint id (default: latest)")]
    = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="default: ./run<ID>-step<N>")]
    = None,
    full: Annotated[bool, typer.Option(help="the whole checkpoint (a tar), not the adapter")]
    = False,
) -> None:  # fmt: skip
    """Download a checkpoint's LoRA adapter as a PEFT directory (adapter_config.json +
    adapter_model.safetensors), loadable by peft and vLLM as it is."""
    client = _client()
    found = client.checkpoints(run_id)
    chosen = [c for c in found if checkpoint in (None, c["id"])]
    if not chosen:
        err(f"run {run_id} has no checkpoint{f' {checkpoint}' if checkpoint else ''}")
        raise typer.Exit(1)
    ckpt = max(chosen, key=lambda c: c["step"])
    with progress_bar(f"checkpoint {ckpt['id']}") as progress:
        if full:
            target = client.download_checkpoint(run_id, ckpt["id"], out or Path("."), progress)
        else:
            dest = out or Path(f"run{run_id}-step{ckpt['step']}")
            target = client.download_adapter(run_id, ckpt["id"], dest, progress)
    print(f"step {ckpt['step']} (adapter v{ckpt['adapter_version']}): {target}")


def register(app: typer.Typer) -> None:
    app.add_typer(experiments, name="experiments")
    app.add_typer(runs, name="runs")
    app.add_typer(checkpoints, name="checkpoints")
