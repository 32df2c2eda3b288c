"""Translate a verl or NeMo-RL GRPO config into a Paddock run spec.

`import_config(config=…, command=…)` takes what those frameworks' users write: a YAML file
(a NeMo-RL recipe inheriting its base through `defaults:`, a verl config over
`ppo_trainer`), a command line of Hydra overrides (`python3 -m verl.trainer.main_ppo
key=value …`, `uv run examples/run_grpo.py --config FILE key=value …`), or both; it
resolves the bases (reading.py, the vendored files under bases/) and returns a
`ConfigImport`: the spec, every source key it could not carry over with the file that set
it, and notes saying why where there is more to say.

`import_spec(source, data)` translates one composed mapping (nested, or flat dotted keys):
`(spec, unmapped)`. A value that is not what the framework itself accepts raises
`SpecImportError` naming the source key; so does a translated value Paddock refuses
(`top_p: 0.9`), naming both keys.

The client's (`paddock spec import`; the platform's import endpoint calls it too), not the
data plane's: a Ray job never needs it. Light: pydantic and PyYAML, no torch. The
key-by-key table with notes is in docs/config-reference.md ("Importing a verl or NeMo-RL
config").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from workers.spec import spec_errors

from . import nemo_rl, reading, verl
from .engine import ALL_LINEAR, MISSING, Builder, SpecImportError, Unresolved, flatten, kind

__all__ = ["ALL_LINEAR", "SOURCES", "ConfigImport", "SpecImportError", "import_config",
           "import_spec"]  # fmt: skip

SOURCES = ("verl", "nemo-rl")
_TRANSLATORS: dict[str, Callable[..., None]] = {
    "verl": verl.translate,
    "nemo-rl": nemo_rl.translate,
}


@dataclass(frozen=True)
class ConfigImport:
    source: str  # "verl" | "nemo-rl"
    spec: dict  # only the keys set from the source; workers.spec fills in its defaults
    unmapped: list[str]  # dotted source keys not carried over, sorted
    origins: dict[str, str] = field(default_factory=dict)  # unmapped key -> file that set it
    notes: dict[str, str] = field(default_factory=dict)  # source key -> why, where known
    files: list[str] = field(default_factory=list)  # what was read, base first


def import_config(
    *,
    config: str | None = None,
    command: str | None = None,
    source: str | None = None,
    dataset_rows: int | None = None,
    config_name: str = "config",
    config_dir: Path | None = None,
    cwd: Path | None = None,
) -> ConfigImport:
    """Import a pasted YAML config and/or command line. `source` ("verl" or "nemo-rl") is
    guessed from the command or the keys when not given. `dataset_rows`, the training set's
    size, turns epochs into steps. `config_dir` (the config file's directory) and `cwd`
    (where the command was run) let `defaults:` and `--config` read the user's own files
    (the CLI); without them only the vendored bases are found."""
    if source is not None and source not in SOURCES:
        raise SpecImportError("source", f"must be one of {', '.join(SOURCES)}; got {source!r}")
    read = reading.read(config=config, command=command, source=source,
                        config_name=config_name, config_dir=config_dir, cwd=cwd)  # fmt: skip
    merged, origin = reading.compose(read.layers)
    spec, unmapped, notes = _translate(read.source, merged, dataset_rows)
    return ConfigImport(
        source=read.source,
        spec=spec,
        unmapped=unmapped,
        origins={k: origin.get(k, reading.COMMAND_LINE) for k in unmapped},
        notes=notes,
        files=[layer.name for layer in read.layers],
    )


def import_spec(
    source: str, data: dict, *, dataset_rows: int | None = None
) -> tuple[dict, list[str]]:
    """Translate `data`, a composed config of `source` ("verl" or "nemo-rl"), into a
    Paddock spec dict.

    Returns the spec (only the keys set from the source; `workers.spec` fills the rest with
    its defaults) and the dotted source keys that were not carried over, sorted. Keys set to
    null (or `???`), and the frameworks' `_target_` class names, are neither. Raises
    `SpecImportError` naming the source key for a value the source itself would refuse, or
    one that translates to a value Paddock refuses."""
    if source not in _TRANSLATORS:
        raise SpecImportError("source", f"must be one of {', '.join(SOURCES)}; got {source!r}")
    spec, unmapped, _ = _translate(source, data, dataset_rows)
    return spec, unmapped


def _translate(
    source: str, data: dict, dataset_rows: int | None
) -> tuple[dict, list[str], dict[str, str]]:
    if not isinstance(data, Mapping):
        raise SpecImportError("(root)", f"must be a mapping of sections, got {kind(data)}")
    flat = {k: v for k, v in flatten(data).items() if not k.endswith("_target_")}
    b = Builder(flat)
    _TRANSLATORS[source](b, dataset_rows=dataset_rows)
    errors = spec_errors(b.spec)
    if errors:
        first = errors[0]
        src = _origin_of(b.origin, first["field"])
        raise SpecImportError(src or first["field"], f"{first['message']} (as {first['field']})")
    unmapped = sorted(
        k for k, v in flat.items() if k not in b.used and v is not None and v != MISSING
    )
    notes = {k: v for k, v in b.notes.items() if k in unmapped}
    for k in unmapped:  # every shell expansion left unresolved says so, mapped key or not
        if isinstance(flat[k], Unresolved):
            notes.setdefault(k, flat[k].why)
    return b.spec, unmapped, notes


def _origin_of(origin: dict[str, str], field: str) -> str | None:
    # reward.functions.1.buffer came from the key that set reward.functions
    parts = field.split(".")
    for i in range(len(parts), 0, -1):
        src = origin.get(".".join(parts[:i]))
        if src is not None:
            return src
    return None
