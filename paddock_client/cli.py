"""The `paddock` command. The API verbs need only this package's light dependencies; the
local verbs (up, doctor, train) import the platform or the engine lazily, and name the
extra to install when it is missing."""

from __future__ import annotations

import getpass
import sys
from typing import Annotated

import typer

from paddock_client import __version__, cli_local, cli_runs, cli_sweeps, cli_team
from paddock_client.client import PaddockAPIError, PaddockClient
from paddock_client.output import err
from paddock_client.transfer import TransferError

app = typer.Typer(
    name="paddock",
    help="Asynchronous LoRA GRPO training: drive a Paddock platform, or run locally.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
cli_local.register(app)
cli_runs.register(app)
cli_sweeps.register(app)
cli_team.register(app)


def _version(value: bool) -> None:
    if value:
        print(f"paddock {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="and exit")
    ] = False,
) -> None:
    """Asynchronous LoRA GRPO training: drive a Paddock platform, or run locally."""


@app.command()
def login(
    url: Annotated[str, typer.Option(help="the platform's address")] = "http://127.0.0.1:8000",
    token: Annotated[str | None, typer.Option(help="an API token (asked for if left out)")] = None,
) -> None:
    """Check an API token against a platform and save both for later commands."""
    token = token or getpass.getpass("API token (create one on your team's page): ")
    client = PaddockClient(url, token.strip())
    me = client.me()
    path = client.save_credentials()
    teams = ", ".join(f"{t['slug']} ({t['role']})" for t in me["teams"]) or "no team"
    print(f"logged in to {client.url} as {me['username']}: {teams}; saved to {path}")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit code (0 ok, 1 refused by the platform, 2 bad usage)."""
    try:
        code = app(args=argv, prog_name="paddock", standalone_mode=False)
    except (PaddockAPIError, TransferError) as exc:
        err(str(exc))
        return 1
    except typer.Abort:
        err("aborted")
        return 130
    except KeyboardInterrupt:
        return 130
    except typer.Exit as exc:  # click.exceptions.Exit: --help, --version, typer.Exit(code)
        return exc.exit_code
    except Exception as exc:
        # a usage error: click's ClickException (vendored by typer 0.2x, click's own before),
        # told apart by what it has rather than by a class either version may lack
        if not (hasattr(exc, "show") and hasattr(exc, "exit_code")):
            raise
        exc.show()
        return exc.exit_code
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
