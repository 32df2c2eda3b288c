"""Channels group names (docs/live-protocol.md): `run.<id>` and `experiment.<id>`, and
`access`, which every stream joins: credentials that stopped working (live/access.py)."""

ACCESS_GROUP = "access"


def run_group(run_id: int) -> str:
    return f"run.{run_id}"


def experiment_group(experiment_id: int) -> str:
    return f"experiment.{experiment_id}"
