"""The verbs of a team's things besides runs: datasets, API tokens, secrets, Ray clusters."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from paddock_client.client import PaddockClient
from paddock_client.options import Format, LimitOpt, OutputOpt, TeamOpt
from paddock_client.output import field, progress_bar, show_list, show_one

DATASET_COLUMNS = [
    ("ID", field("id")), ("TEAM", field("team")), ("NAME", field("name")),
    ("ROWS", field("rows")), ("BYTES", field("size_bytes")), ("SHA256", field("sha256")),
    ("CREATED", field("created_at")),
]  # fmt: skip
TOKEN_COLUMNS = [
    ("ID", field("id")), ("NAME", field("name")), ("PREFIX", field("prefix")),
    ("USER", field("user", "username")), ("CREATED", field("created_at")),
    ("EXPIRES", field("expires_at")), ("REVOKED", field("revoked_at")),
    ("LAST USED", field("last_used_at")),
]  # fmt: skip
SECRET_COLUMNS = [
    ("NAME", field("name")), ("VALUE", field("masked")),
    ("UPDATED BY", field("updated_by", "username")), ("UPDATED", field("updated_at")),
]  # fmt: skip
CLUSTER_COLUMNS = [
    ("ID", field("id")), ("NAME", field("name")), ("TEAM", field("team")),
    ("BACKENDS", field("backends")), ("HEALTHY", field("healthy")),
    ("LAST SEEN", field("last_seen_at")), ("ERROR", field("health_error")),
]  # fmt: skip


def _client() -> PaddockClient:
    return PaddockClient.from_environment()


# --- datasets ---------------------------------------------------------------------------------

datasets = typer.Typer(no_args_is_help=True, help="Upload and list a team's datasets.")


@datasets.command("upload")
def datasets_upload(
    file: Annotated[Path, typer.Argument(help="JSONL (one object a line) or Parquet")],
    team: TeamOpt = None,
    name: Annotated[str | None, typer.Option(help="default: the file's name")] = None,
    output: OutputOpt = Format.table,
) -> None:
    """Upload a dataset; a run names it `dataset://<id>`."""
    with progress_bar(file.name) as progress:
        dataset = _client().upload_dataset(file, team=team, name=name, progress=progress)
    if output is Format.json:
        show_one(dataset, output)
    else:
        print(f"dataset://{dataset['id']}  {dataset['name']}: {dataset['rows']} rows")


@datasets.command("list")
def datasets_list(
    team: TeamOpt = None, limit: LimitOpt = 50, output: OutputOpt = Format.table
) -> None:
    """Datasets of your teams, newest first."""
    client = _client()
    found = client.datasets(team=client.team_id(team) if team else None)
    show_list(list(itertools.islice(found, limit)), DATASET_COLUMNS, output)


# --- tokens -----------------------------------------------------------------------------------

tokens = typer.Typer(no_args_is_help=True, help="Personal API tokens of a team.")


@tokens.command("list")
def tokens_list(team: TeamOpt = None, output: OutputOpt = Format.table) -> None:
    """The team's tokens (yours; a team admin sees everyone's)."""
    show_list(_client().tokens(team), TOKEN_COLUMNS, output)


@tokens.command("create")
def tokens_create(
    name: Annotated[str, typer.Argument(help="what the token is for")],
    team: TeamOpt = None,
    expires_at: Annotated[str | None, typer.Option(help="ISO 8601 time")] = None,
    output: OutputOpt = Format.table,
) -> None:
    """Create a token; its secret is printed this once."""
    token = _client().create_token(team, name, expires_at)
    if output is Format.json:
        show_one(token, output)
    else:
        print(token["token"])
        typer.echo(f"token {token['id']} '{token['name']}': shown once, store it now", err=True)


@tokens.command("revoke")
def tokens_revoke(
    token_id: Annotated[int, typer.Argument(help="token id (tokens list)")], team: TeamOpt = None
) -> None:
    """Revoke a token at once."""
    token = _client().revoke_token(team, token_id)
    print(f"token {token['id']} '{token['name']}' revoked at {token['revoked_at']}")


# --- secrets ----------------------------------------------------------------------------------

secrets = typer.Typer(
    no_args_is_help=True,
    help="A team's secrets: values a spec names (secret: NAME) and its runs' jobs receive; "
    "never shown again once set.",
)


@secrets.command("list")
def secrets_list(team: TeamOpt = None, output: OutputOpt = Format.table) -> None:
    """The team's secrets, masked."""
    show_list(_client().secrets(team), SECRET_COLUMNS, output)


@secrets.command("set")
def secrets_set(
    name: Annotated[str, typer.Argument(help="the name a spec uses (secret: NAME)")],
    team: TeamOpt = None,
) -> None:
    """Set a secret (team admins) from standard input or a hidden prompt, never from the
    command line (it would stay in the shell's history)."""
    if sys.stdin.isatty():
        value = typer.prompt(f"value of {name}", hide_input=True)
    else:
        value = sys.stdin.read().rstrip("\n")
    secret = _client().set_secret(team, name, value)
    print(f"secret {secret['name']} set ({secret['masked']})")


@secrets.command("delete")
def secrets_delete(name: Annotated[str, typer.Argument()], team: TeamOpt = None) -> None:
    """Delete a secret (team admins); runs that name it fail at their next start."""
    _client().delete_secret(team, name)
    print(f"secret {name} deleted")


# --- clusters ---------------------------------------------------------------------------------

clusters = typer.Typer(no_args_is_help=True, help="Ray clusters that runs are dispatched to.")


def _json_option(text: str | None, what: str) -> dict | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        raise typer.BadParameter(f"not JSON: {text!r}", param_hint=what) from None
    if not isinstance(value, dict):
        raise typer.BadParameter("a JSON object", param_hint=what)
    return value


@clusters.command("list")
def clusters_list(output: OutputOpt = Format.table) -> None:
    """Shared clusters and those of your teams."""
    show_list(_client().clusters(), CLUSTER_COLUMNS, output)


@clusters.command("register")
def clusters_register(
    name: Annotated[str, typer.Argument(help="a unique name")],
    address: Annotated[str, typer.Argument(help="its Jobs API, e.g. http://head:8265")],
    team: TeamOpt = None,
    backends: Annotated[str | None, typer.Option(help="comma-separated, e.g. torch,vllm")]
    = None,
    capacity: Annotated[str | None, typer.Option(help='JSON, e.g. {"cpus": 16, "gpus": 8}')]
    = None,
    labels: Annotated[str | None, typer.Option(help="JSON object")] = None,
    dashboard_url: Annotated[str | None, typer.Option(help="link shown on run pages")] = None,
    output: OutputOpt = Format.table,
) -> None:  # fmt: skip
    """Register a Ray cluster for a team (its admins and owners may). A shared cluster is
    registered on the server: `manage.py paddock_cluster register`."""
    client = _client()
    cluster = client.register_cluster(
        name=name, address=address, team=client.team_id(team),
        backends=[b.strip() for b in backends.split(",")] if backends else None,
        capacity=_json_option(capacity, "--capacity"), labels=_json_option(labels, "--labels"),
        dashboard_url=dashboard_url,
    )  # fmt: skip
    show_one(cluster, output)


@clusters.command("health")
def clusters_health(
    cluster_id: Annotated[int, typer.Argument(help="cluster id (clusters list)")],
    output: OutputOpt = Format.table,
) -> None:
    """Check a cluster's Jobs API now and print what it found; exit 1 when unhealthy."""
    cluster = _client().cluster_health(cluster_id)
    show_one(cluster, output)
    if not cluster["healthy"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(datasets, name="datasets")
    app.add_typer(tokens, name="tokens")
    app.add_typer(secrets, name="secrets")
    app.add_typer(clusters, name="clusters")
