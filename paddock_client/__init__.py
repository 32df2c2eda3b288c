"""The Paddock client: the REST API client (`paddock_client.client`) and the `paddock`
command (`paddock_client.cli`). Light on purpose: requests, pydantic, PyYAML, typer and
rich, never Django or torch; the local verbs that need those (up, doctor, train) say which
extra to install."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("paddock")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
