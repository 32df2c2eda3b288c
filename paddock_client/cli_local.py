"""The verbs that run on this machine: `up` and `doctor` (the platform: the `platform`
extra), `train` and `preflight` (the engine: the `workers` extra), and `spec` (the run spec:
light)."""

from __future__ import annotations

import importlib.util
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from paddock_client.options import SetOpt
from paddock_client.output import err

# which extra brings which verb's imports (pyproject.toml's optional-dependencies)
EXTRAS = {"platform": ("django", "celery", "uvicorn"), "workers": ("torch", "transformers")}


def require_extras(verb: str, *extras: str) -> None:
    """Exit with the pip command to run when an extra `verb` needs is not installed."""
    missing = [m for extra in extras for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]
    if missing:
        name = "all" if len(extras) > 1 else extras[0]
        err(
            f"`paddock {verb}` needs the {name} extra ({', '.join(missing)} not installed): "
            f"pip install 'paddock[{name}]'"
        )
        raise typer.Exit(2)


def up(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    no_demo: Annotated[bool, typer.Option("--no-demo", help="no demo experiment")] = False,
) -> None:
    """Run the whole platform on this machine on embedded defaults."""
    require_extras("up", "platform", "workers")
    from paddock.embedded.up import UpOptions, up  # the Django project (platform/paddock)

    raise typer.Exit(up(UpOptions(host=host, port=port, demo=not no_demo)))


def doctor() -> None:
    """Which components and rollout backends this machine has."""
    require_extras("doctor", "platform")
    from paddock.ops.doctor import doctor

    raise typer.Exit(doctor())


def _spec_errors(source: str, exc) -> None:
    for error in exc.errors:
        print(f"{source}: {error['field']}: {error['message']}", file=sys.stderr)


def train(
    spec: Annotated[Path, typer.Argument(help="a run spec, YAML or JSON")],
    out: Annotated[Path | None, typer.Option(help="output folder (default: under runs/)")] = None,
    set_: SetOpt = None,
) -> None:
    """Run a spec in this process: no platform, no Ray."""
    require_extras("train", "workers")
    from workers.spec import SpecError
    from workers.train import default_out_dir, train

    out = out or default_out_dir()
    try:
        outcome = train(str(spec), out_dir=out, overrides=set_ or [], progress=True)
    except SpecError as exc:
        _spec_errors(str(spec), exc)
        raise typer.Exit(2) from None
    except FileNotFoundError as exc:
        err(f"train: {exc}")
        raise typer.Exit(2) from None
    print(f"{outcome.state} at step {outcome.step} (adapter v{outcome.adapter_version}); {out}")
    raise typer.Exit(0 if outcome.state == "succeeded" else 1)


def preflight(
    spec: Annotated[Path, typer.Argument(help="a run spec, YAML or JSON")],
    out: Annotated[Path | None, typer.Option(help="the short runs' folder (default: runs/)")]
    = None,
    set_: SetOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="the verdict as JSON")] = False,
    platform: Annotated[
        bool, typer.Option(help="on a cluster, through the platform (paddock login first)")
    ] = False,
    cluster: Annotated[int | None, typer.Option(help="with --platform: the cluster id")] = None,
    team: Annotated[str | None, typer.Option(help="with --platform: the team")] = None,
) -> None:  # fmt: skip
    """The pre-flight check of a spec on this machine's engine (or, with --platform, on a
    cluster's): a few steps that verify the engine serves the trainer's adapter, their
    logprobs agree, async equals sync, the rewards teach, prompts fit and responses end
    (docs/preflight.md). Exit 1 if a check fails."""
    if platform:
        raise typer.Exit(_preflight_on_platform(spec, set_ or [], cluster, team, as_json))
    require_extras("preflight", "workers")
    from workers.preflight import preflight as check
    from workers.preflight import verdict_lines
    from workers.spec import SpecError
    from workers.train import default_out_dir, resolve_spec

    try:
        resolved = resolve_spec(str(spec), set_ or [])
    except SpecError as exc:
        _spec_errors(str(spec), exc)
        raise typer.Exit(2) from None
    verdict = check(resolved, out or default_out_dir(), log=err)
    if as_json:
        print(verdict.model_dump_json(indent=2))
    else:
        print("\n".join(verdict_lines(verdict)))
        print("pre-flight " + ("passed" if verdict.passed else "FAILED"))
    raise typer.Exit(0 if verdict.passed else 1)


def _preflight_on_platform(
    spec: Path, overrides: list[str], cluster: int | None, team: str | None, as_json: bool
) -> int:
    """Launch the check alone (`preflight: only`) and wait for every engine's verdict."""
    import time

    import yaml

    from paddock_client.cli_runs import _client, preflight_lines
    from workers.spec import apply_overrides  # pydantic and PyYAML only

    client = _client()
    data = apply_overrides(yaml.safe_load(spec.read_text()) or {}, overrides)
    reply = client.launch(team=team, name=f"pre-flight: {spec.stem}", spec=data,
                          cluster=cluster, preflight="only")  # fmt: skip
    experiment = reply["experiment"]["id"]
    err(f"experiment {experiment}: the pre-flight check runs on the cluster")
    body = client.preflight(experiment)
    while body["state"] == "pending":  # the job's few steps take a minute or a few
        time.sleep(2)
        body = client.preflight(experiment)
    print(json.dumps(body, indent=2) if as_json else "\n".join(preflight_lines(body)))
    return 0 if body["state"] == "passed" else 1


spec_app = typer.Typer(no_args_is_help=True, help="The run spec: its schema, checks, imports.")


@spec_app.command("schema")
def spec_schema() -> None:
    """Print the RunSpec JSON Schema."""
    from workers.spec import spec_json_schema  # pydantic and PyYAML only

    print(json.dumps(spec_json_schema(), indent=2))


@spec_app.command("validate")
def spec_validate(file: Annotated[Path, typer.Argument(help="a spec file")]) -> None:
    """Check a spec file, naming the path of each error."""
    from workers import spec

    try:
        spec.load_spec(file)
    except spec.SpecError as exc:
        _spec_errors(str(file), exc)
        raise typer.Exit(1) from None
    print(f"{file}: valid")


class Source(StrEnum):  # spec_import.SOURCES (not imported here: lazily, per verb)
    verl = "verl"
    nemo_rl = "nemo-rl"


@spec_app.command("import")
def spec_import(
    file: Annotated[
        Path | None,
        typer.Argument(help="the other framework's config (YAML) or a script holding its command"),
    ] = None,
    source: Annotated[
        Source | None, typer.Option("--from", help="the framework (default: guessed)")
    ] = None,
    command: Annotated[
        str | None, typer.Option(help="a command line of overrides, applied over FILE")
    ] = None,
    dataset_rows: Annotated[
        int | None, typer.Option(min=1, help="the training set's size: epochs become steps")
    ] = None,
    out: Annotated[Path | None, typer.Option("-o", "--out", help="write here (default: stdout)")]
    = None,
) -> None:  # fmt: skip
    """Translate a verl or NeMo-RL GRPO config (a YAML file inheriting its base through
    `defaults:`, a command line, or both) into a RunSpec (YAML); the keys it could not map
    go to stderr, each with the file that set it."""
    import yaml

    from paddock_client.spec_import import import_config  # pydantic and PyYAML only
    from paddock_client.spec_import.reading import looks_like_command
    from workers.spec import SpecError

    if file is None and command is None:
        err("spec import: give a config file or --command")
        raise typer.Exit(2)
    config = text = file.read_text() if file is not None else None
    if text is not None and looks_like_command(text):  # a script: its command line
        if command is not None:
            err(f"spec import: {file} holds a command line already: leave --command out")
            raise typer.Exit(2)
        config, command = None, text
    try:
        result = import_config(
            config=config,
            command=command,
            source=source.value if source else None,
            dataset_rows=dataset_rows,
            config_name=file.name if file is not None else "config",
            config_dir=file.parent if file is not None else None,
            cwd=Path.cwd(),
        )
    except SpecError as exc:
        _spec_errors(str(file or "--command"), exc)
        raise typer.Exit(1) from None
    text = yaml.safe_dump(result.spec, sort_keys=False)
    if out:
        out.write_text(text)
    else:
        sys.stdout.write(text)
    for key in result.unmapped:
        note = result.notes.get(key)
        where = result.origins.get(key, str(file))
        err(f"{where}: {key}: not mapped (left out of the spec)" + (f": {note}" if note else ""))


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(doctor)
    app.command()(train)
    app.command()(preflight)
    app.add_typer(spec_app, name="spec")
