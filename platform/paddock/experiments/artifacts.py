"""The artifact store (fsspec URI, PADDOCK_ARTIFACTS_URI): checkpoint downloads and
uploaded datasets.

A checkpoint URI comes from a job's report, so it is taken (at ingest) and served (at
download) only inside its own run's folder of the store, resolved (workers/path_guard.py):
a job must not make the platform serve /etc/passwd, nor another team's checkpoint."""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

import fsspec
from django.conf import settings
from django.db import transaction

from paddock.core.errors import DomainError, ErrorCode
from paddock.core.jsonbody import JsonBodyError, json_parse
from paddock.experiments.models import Checkpoint, Dataset
from paddock.teams.access import Actor
from paddock.teams.models import Role, Team
from paddock.teams.services import audit_record
from workers.path_guard import PathGuard, PathRefused, file_path, inside

CHUNK = 1024 * 1024


def _split(uri: str) -> tuple[str, str]:
    scheme, sep, rest = uri.partition("://")
    if not sep:
        scheme, rest = "file", uri
    return scheme, posixpath.normpath("/" + rest.lstrip("/")) if scheme == "file" else rest


def run_folder_uri(run_id: int) -> str:
    """Where the run's jobs write (the bootstrap's artifacts_uri)."""
    return f"{settings.PADDOCK_ARTIFACTS_URI.rstrip('/')}/runs/{run_id}"


def store_path() -> str | None:
    """The artifact store as a local directory; None for a store of another scheme."""
    try:
        return file_path(settings.PADDOCK_ARTIFACTS_URI)
    except PathRefused:
        return None


def run_artifact_allowed(uri: str, run_id: int) -> bool:
    """True when `uri` lies inside the run's own folder of the store: for a directory store,
    resolved (links followed); for another store, by its spelling, without `..`."""
    folder = run_folder_uri(run_id)
    if store_path() is None:
        scheme, path = _split(uri)
        root_scheme, root = _split(folder)
        return (
            scheme == root_scheme
            and ".." not in path.split("/")
            and (path == root or path.startswith(root + "/"))
        )
    try:
        return inside(file_path(uri), file_path(folder))
    except PathRefused:
        return False


@dataclass
class Download:
    filename: str
    content_type: str
    size: int | None
    chunks: Iterator[bytes]


class _Sink(io.RawIOBase):
    """A write-only file whose bytes a generator drains between tar members."""

    def __init__(self):
        self.parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def drain(self) -> Iterator[bytes]:
        parts, self.parts = self.parts, []
        yield from parts


def _tar_chunks(fs, root: str, top: str) -> Iterator[bytes]:
    # A streaming tar ("w|"): one member at a time goes through memory, never the whole
    # checkpoint; a LoRA checkpoint's largest member (optimizer state) is small.
    sink = _Sink()
    with tarfile.open(fileobj=sink, mode="w|") as tar:
        for path in sorted(fs.find(root)):
            info = tarfile.TarInfo(name=posixpath.join(top, posixpath.relpath(path, root)))
            info.size = fs.size(path)
            with fs.open(path, "rb") as fh:
                tar.addfile(info, fh)
            yield from sink.drain()
    yield from sink.drain()


def _file_chunks(fs, path: str) -> Iterator[bytes]:
    with fs.open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            yield chunk


# a checkpoint directory keeps its LoRA adapter, as PEFT writes one, in this folder
# (workers/loop/executor.py); the rest is the optimizer, RNG and buffer state
ADAPTER_DIR = "adapter"
CHECKPOINT_PARTS = ("all", ADAPTER_DIR)


def _adapter_root(fs, path: str) -> str:
    for root in (posixpath.join(path, ADAPTER_DIR), path):
        if fs.isfile(posixpath.join(root, "adapter_config.json")):
            return root
    raise DomainError(ErrorCode.ARTIFACT_MISSING, "this checkpoint holds no PEFT adapter")


def checkpoint_download(*, checkpoint: Checkpoint, part: str = "all") -> Download:
    """Stream a checkpoint from the artifact store: a file as is, a directory as a tar;
    `part="adapter"`, its adapter folder alone (`<name>/adapter/…`: a PEFT directory, what
    peft and vLLM load), without the optimizer state. The caller has checked that the actor
    may read the checkpoint's run."""
    if part not in CHECKPOINT_PARTS:
        raise DomainError(ErrorCode.INVALID, f"one of {list(CHECKPOINT_PARTS)}", field="part")
    if not run_artifact_allowed(checkpoint.uri, checkpoint.run_id):
        raise DomainError(
            ErrorCode.ARTIFACT_OUTSIDE_STORE, "this checkpoint is not in its run's folder"
        )
    fs, path = fsspec.core.url_to_fs(checkpoint.uri)
    if not fs.exists(path):
        raise DomainError(ErrorCode.ARTIFACT_MISSING, "the checkpoint's files are gone")
    if store_path() is not None and fs.isdir(path):
        # a link inside the folder must not make the tar carry a file from elsewhere
        guard = PathGuard((file_path(run_folder_uri(checkpoint.run_id)),))
        try:
            guard.tree(path, "checkpoint")
        except PathRefused:
            raise DomainError(
                ErrorCode.ARTIFACT_OUTSIDE_STORE, "this checkpoint links outside its run's folder"
            ) from None
    name = f"run{checkpoint.run_id}-step{checkpoint.step}"
    if part == ADAPTER_DIR:
        root, top = _adapter_root(fs, path), posixpath.join(name, ADAPTER_DIR)
        return Download(f"{name}-adapter.tar", "application/x-tar", None,
                        _tar_chunks(fs, root, top))  # fmt: skip
    if fs.isdir(path):
        return Download(f"{name}.tar", "application/x-tar", None, _tar_chunks(fs, path, name))
    ext = posixpath.splitext(path)[1]
    return Download(
        f"{name}{ext}", "application/octet-stream", fs.size(path), _file_chunks(fs, path)
    )


def _check_jsonl(path: str) -> int:
    """Rows of a JSONL file, read a line at a time from disk."""
    rows = 0
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json_parse(line)  # the platform's one JSON reader: depth, NUL, numbers
            except JsonBodyError as exc:
                where = f" at {exc.field}" if exc.field else ""
                raise DomainError(
                    ErrorCode.INVALID, f"line {number}{where}: {exc.message}", field="file"
                ) from None
            # which columns hold the prompt and the answer is the run spec's to say
            # (data.prompt_key, data.answer_key); here a row only has to be a row
            if not isinstance(row, dict):
                raise DomainError(
                    ErrorCode.INVALID,
                    f"line {number}: not a JSON object (one row of columns)",
                    field="file",
                )
            rows += 1
    if rows == 0:
        raise DomainError(ErrorCode.INVALID, "the file has no rows", field="file")
    return rows


PARQUET_MAGIC = b"PAR1"


def _check_parquet(path: str) -> int:
    """The row count from the file's footer: what pyarrow can read a job can too."""
    import pyarrow as pa  # only uploads need it
    import pyarrow.parquet as pq

    try:
        rows = pq.ParquetFile(path).metadata.num_rows
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise DomainError(
            ErrorCode.INVALID, f"not a readable Parquet file ({exc})", field="file"
        ) from None
    if rows == 0:
        raise DomainError(ErrorCode.INVALID, "the file has no rows", field="file")
    return rows


@dataclass(frozen=True)
class _Spooled:
    path: str
    size: int
    sha256: str
    parquet: bool


def _spool(data: bytes | IO[bytes], into: str) -> _Spooled:
    """`data` (bytes, or an uploaded file read in chunks) written to a file under `into`,
    hashed and counted as it goes, refused the moment it passes the limit: a dataset never
    sits in memory whole."""
    limit = settings.PADDOCK_MAX_DATASET_BYTES
    chunks = _chunks(data)
    digest, size, head, tail = hashlib.sha256(), 0, b"", b""
    os.makedirs(into, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix="upload-", dir=into)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise DomainError(ErrorCode.TOO_LARGE, f"at most {limit} bytes", field="file")
                digest.update(chunk)
                out.write(chunk)
                head = (head + chunk)[:4] if len(head) < 4 else head
                tail = (tail + chunk)[-4:]
    except BaseException:
        os.unlink(path)
        raise
    return _Spooled(path, size, digest.hexdigest(), head == tail == PARQUET_MAGIC)


def _chunks(data: bytes | IO[bytes]):
    if isinstance(data, bytes | bytearray):
        yield bytes(data)
        return
    if hasattr(data, "chunks"):  # Django's UploadedFile
        yield from data.chunks(CHUNK)
        return
    while chunk := data.read(CHUNK):
        yield chunk


def dataset_upload(*, actor: Actor, team: Team, name: str, data: bytes | IO[bytes]) -> Dataset:
    """Store a dataset (JSONL of JSON objects, or Parquet) under the team in the artifact
    store, named by its SHA-256 (the same bytes twice give the same dataset). `data`: the
    bytes, or a file read in chunks (an upload: streamed to disk and refused at
    PADDOCK_MAX_DATASET_BYTES, never read into memory whole). A run names it
    `dataset://<id>`; its columns are mapped by the run spec's data section."""
    actor.require(team.pk, Role.MEMBER, what="team")
    store = store_path()
    spooled = _spool(data, os.path.join(store, "tmp") if store else tempfile.gettempdir())
    try:
        if spooled.parquet:
            rows, ext = _check_parquet(spooled.path), "parquet"
        else:
            try:
                rows, ext = _check_jsonl(spooled.path), "jsonl"
            except UnicodeDecodeError:
                raise DomainError(
                    ErrorCode.INVALID, "must be UTF-8 JSONL text or a Parquet file", field="file"
                ) from None
        digest = spooled.sha256
        uri = (
            f"{settings.PADDOCK_ARTIFACTS_URI.rstrip('/')}/teams/{team.pk}/datasets/{digest}.{ext}"
        )
        fs, path = fsspec.core.url_to_fs(uri)
        if not fs.exists(path):
            fs.makedirs(posixpath.dirname(path), exist_ok=True)
            if store is not None:  # the spool is in the store: a rename puts it whole
                os.replace(spooled.path, path)
            else:
                fs.put_file(spooled.path, path)
    finally:
        if os.path.exists(spooled.path):
            os.unlink(spooled.path)
    with transaction.atomic():
        dataset, created = Dataset.objects.get_or_create(
            team=team, sha256=digest,
            defaults={"name": name, "uri": uri, "size_bytes": spooled.size, "rows": rows,
                      "created_by": actor.user},
        )  # fmt: skip
        if created:
            audit_record(
                actor=actor, team_id=team.pk, action="dataset.upload", target_type="dataset",
                target_id=dataset.pk, data={"name": name, "sha256": digest, "rows": rows},
            )  # fmt: skip
    return dataset
