"""A verl or NeMo-RL config pasted in the launcher, translated into a run spec.

The translation is the client's (`paddock_client.spec_import`, what `paddock spec import`
runs: pydantic and PyYAML, part of every install), called here without a directory, so the
only files it reads are the peers' bases vendored beside it. A dataset of the team, when
one is picked, takes the place of the config's data files and gives epochs their length."""

from __future__ import annotations

from typing import Any

from paddock.core.errors import DomainError, ErrorCode, not_found
from paddock.experiments.models import Dataset
from paddock.teams.access import Actor
from paddock_client.spec_import import ConfigImport, SpecImportError, import_config


def spec_import(
    *,
    actor: Actor,
    config: str | None,
    command: str | None,
    source: str | None,
    dataset_id: int | None,
) -> dict[str, Any]:
    """The imported spec, the keys left out (with the file that set each and why, where
    known), the files read; DomainError(IMPORT_INVALID) naming the source key otherwise."""
    dataset = None
    if dataset_id is not None:
        dataset = Dataset.objects.filter(pk=dataset_id, team_id__in=actor.team_ids).first()
        if dataset is None:
            raise not_found("dataset")
    try:
        result: ConfigImport = import_config(
            config=config or None,
            command=command or None,
            source=source or None,
            dataset_rows=dataset.rows if dataset else None,
        )
    except SpecImportError as exc:
        first = exc.errors[0]
        raise DomainError(
            ErrorCode.IMPORT_INVALID, f"{first['field']}: {first['message']}", field=first["field"]
        ) from None
    spec = result.spec
    if dataset is not None:
        data = spec.setdefault("data", {})
        data.update(path=f"dataset://{dataset.pk}", task="dataset")
        if result.source == "verl":  # verl's files keep the gold answer there
            data.setdefault("answer_key", "reward_model.ground_truth")
    return {
        "source": result.source,
        "spec": spec,
        "files": result.files,
        "unmapped": [
            {"key": k, "origin": result.origins.get(k, ""), "note": result.notes.get(k)}
            for k in result.unmapped
        ],
    }
