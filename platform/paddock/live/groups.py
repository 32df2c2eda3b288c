"""Channels group names (docs/live-protocol.md): `run.<id>` and `experiment.<id>`, and
`access`: credentials that stopped working, heard once a process (live/revocations.py)."""

ACCESS_GROUP = "access"


def run_group(run_id: int) -> str:
    return f"run.{run_id}"


def experiment_group(experiment_id: int) -> str:
    return f"experiment.{experiment_id}"
