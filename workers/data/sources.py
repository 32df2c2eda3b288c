"""Dataset files read with the `datasets` library, and their rows mapped to examples.

A source is a JSONL or Parquet file or a `save_to_disk` directory; `data.prompt_key` and
`data.answer_key` name the columns (dotted keys and list indices reach inside nested values,
as verl's `reward_model.ground_truth` or NeMo-RL's `messages.-1.content`). Every other column
of a row travels with the example as metadata, for rewards.
"""

from __future__ import annotations

import glob
import json
import math
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..path_guard import PathGuard, PathRefused, file_path
from .prompts import Message, Prompt

FORMATS = ("jsonl", "parquet", "save_to_disk")


def local_path(path: str, field: str, guard: PathGuard | None = None) -> Path:
    """`path` or a file:// URI as a local path, read as the platform reads it
    (workers/path_guard.py); with `guard` (under the platform), it, every file of a directory
    and every match of a pattern must lie inside the run's roots. `dataset://<id>` is the
    platform's to resolve (at dispatch, into the upload's URI): a job that still sees one ran
    without it."""
    if path.startswith("dataset://"):
        raise ValueError(
            f"data.{field}: {path} names an uploaded dataset, which the platform resolves when "
            "it dispatches the run; outside the platform give the file's path"
        )
    if "://" in path or guard is not None:
        try:
            path = guard.check(path, f"data.{field}") if guard else file_path(path)
        except PathRefused as exc:
            raise ValueError(
                f"data.{field}: {exc}" if not str(exc).startswith("data.") else str(exc)
            ) from None
    local = Path(path)
    if glob.has_magic(path):  # shards: train-*.parquet
        if not glob.glob(path):
            raise FileNotFoundError(f"data.{field}: no file matches {path}")
    elif not local.exists():
        raise FileNotFoundError(f"data.{field}: {local} does not exist")
    return local


def detect_format(path: Path, fmt: str, field: str) -> str:
    if fmt != "auto":
        return fmt
    if path.is_dir():
        return "save_to_disk"
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes[-1:] == [".parquet"]:
        return "parquet"
    if suffixes[-1:] in ([".jsonl"], [".json"]) or suffixes[-2:] in ([".jsonl", ".gz"],):
        return "jsonl"
    raise ValueError(
        f"data.{field}: cannot tell the format of {path.name} from its name; set data.format "
        f"to one of {', '.join(FORMATS)}"
    )


def read_table(path: Path, fmt: str, split: str, field: str):
    """The rows of one source as a `datasets.Dataset`, held in memory: the Arrow cache that
    the loaders build goes to a temporary directory, not to the user's HF cache."""
    import datasets

    datasets.disable_progress_bars()
    if fmt == "save_to_disk":
        if not any((path / name).is_file() for name in ("dataset_info.json", "dataset_dict.json")):
            raise ValueError(
                f"data.{field}: {path} is a directory but not one written by save_to_disk (no "
                "dataset_info.json or dataset_dict.json); for Parquet or JSONL shards give a "
                "pattern such as train-*.parquet"
            )
        loaded = datasets.load_from_disk(str(path), keep_in_memory=True)
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                which = "eval_split" if field == "eval_path" else "split"
                raise ValueError(
                    f"data.{which}: {path} has no split {split!r} (splits: {', '.join(loaded)})"
                )
            return loaded[split]
        return loaded
    builder = "json" if fmt == "jsonl" else "parquet"
    # a pattern's matches as this process saw them (and a guard checked), not re-globbed
    files = sorted(glob.glob(str(path))) if glob.has_magic(str(path)) else str(path)
    with tempfile.TemporaryDirectory(prefix="paddock-data-") as cache:
        try:
            return datasets.load_dataset(
                builder, data_files=files, split="train", keep_in_memory=True, cache_dir=cache
            )
        except (datasets.exceptions.DatasetGenerationError, ValueError, OSError) as exc:
            cause = exc.__cause__ or exc
            raise ValueError(f"data.{field}: {path} is not readable as {fmt}: {cause}") from exc


def _dig(row: dict[str, Any], key: str) -> Any:
    """The value at a dotted key path; KeyError with a message naming the missing part."""
    parts = key.split(".")
    value: Any = row
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth]) or "the row"
        if isinstance(value, dict):
            if part not in value:
                raise KeyError(f"{where} has no key {part!r} (keys: {', '.join(map(str, value))})")
            value = value[part]
        elif isinstance(value, list):
            try:
                value = value[int(part)]
            except (ValueError, IndexError):
                raise KeyError(
                    f"{where} is a list of {len(value)}; {part!r} is not an index of it"
                ) from None
        else:
            raise KeyError(f"{where} is a {type(value).__name__}, not an object or a list")
    return value


def _messages(value: list[Any]) -> list[Message]:
    out = []
    for j, m in enumerate(value):
        if not (
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
        ):
            raise TypeError(f"message {j} is not an object with a string role and content")
        # Parquet structs carry every field of every message (None where absent): drop those
        # so a template's `if message.reasoning_content` sees what the row said.
        out.append({k: v for k, v in m.items() if v is not None})
    # A trailing assistant message is the reference response (NeMo-RL's layout), never part
    # of what the policy is asked: the generation prompt goes after the last user turn.
    if out and out[-1]["role"] == "assistant":
        out = out[:-1]
    if not out:
        raise TypeError("has no message before the reference answer")
    return out


def _prompt(value: Any) -> Prompt:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return _messages(value)
    raise TypeError(f"is a {type(value).__name__}, not a string or a list of messages")


def _answer(value: Any) -> str:
    if value is None:
        raise TypeError("is null")
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    return json.dumps(_jsonable(value), ensure_ascii=False)  # a list or object of answers


def _jsonable(value: Any) -> Any:
    """Metadata go to rewards and to a reward service as JSON: plain values only."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)  # timestamps, decimals, bytes: their text


def map_rows(
    rows: Iterable[dict[str, Any]],
    columns: list[str],
    where: str,
    prompt_key: str,
    answer_key: str,
    key_fields: tuple[str, str] = ("prompt_key", "answer_key"),
) -> list[tuple[Prompt, str, dict[str, Any]]]:
    """(prompt, answer, metadata) of every row; errors name the setting, the row and what
    was wrong."""
    for key, name in zip((prompt_key, answer_key), key_fields, strict=True):
        top = key.split(".")[0]
        if top not in columns:
            raise ValueError(
                f"data.{name}: no column {top!r} in {where} (columns: {', '.join(columns)})"
            )
    prompt_column = prompt_key.split(".")[0]
    out = []
    for i, row in enumerate(rows):
        parsed = []
        for key, name, convert in (
            (prompt_key, key_fields[0], _prompt),
            (answer_key, key_fields[1], _answer),
        ):
            try:
                value = _dig(row, key)
            except KeyError as exc:
                raise ValueError(f"data.{name}: row {i} of {where}: {exc.args[0]}") from None
            try:
                parsed.append(convert(value))
            except TypeError as exc:
                raise ValueError(f"data.{name}: row {i} of {where}: {key} {exc}") from None
        metadata = {k: _jsonable(v) for k, v in row.items() if k != prompt_column}
        out.append((parsed[0], parsed[1], metadata))
    if not out:
        raise ValueError(f"data: {where} has no rows")
    return out
