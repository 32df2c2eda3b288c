"""Byte transfers of the client: a multipart upload streamed from disk, a download streamed to
disk, and a checkpoint tar streamed into a PEFT adapter directory. Each reports progress as
(bytes so far, total or None); none holds a whole file in memory."""

from __future__ import annotations

import io
import os
import posixpath
import secrets
import tarfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

Progress = Callable[[int, int | None], None]
CHUNK = 1024 * 1024
# what a checkpoint directory holds beside its adapter (workers/loop/checkpoint.py):
# optimizer.pt, rng.pt, buffer.pt, trainer_state.json; the adapter is its adapter/ folder
ADAPTER_DIR = "adapter"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


class TransferError(Exception):
    """What arrived is not what was asked for (no adapter in the checkpoint, …)."""


def _counted(chunks: Iterable[bytes], total: int | None, progress: Progress | None):
    done = 0
    for chunk in chunks:
        done += len(chunk)
        if progress:
            progress(done, total)
        yield chunk


class MultipartFile(io.RawIOBase):
    """A multipart/form-data body read from disk as requests sends it: its length is known
    up front (Content-Length, no chunked encoding, which not every server takes)."""

    def __init__(self, fields: dict[str, str], file_field: str, path: Path, progress=None):
        self.boundary = f"paddock-{secrets.token_hex(12)}"
        self.content_type = f"multipart/form-data; boundary={self.boundary}"
        head = b"".join(
            f'--{self.boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
            .encode()
            for k, v in fields.items()
        )  # fmt: skip
        head += (
            f'--{self.boundary}\r\nContent-Disposition: form-data; name="{file_field}"; '
            f'filename="{path.name}"\r\nContent-Type: application/octet-stream\r\n\r\n'
        ).encode()
        self._head, self._tail = head, f"\r\n--{self.boundary}--\r\n".encode()
        self._file = open(path, "rb")  # noqa: SIM115 (closed by close())
        self._size = len(head) + os.fstat(self._file.fileno()).st_size + len(self._tail)
        self._sent, self._progress = 0, progress

    def __len__(self) -> int:
        return self._size

    def tell(self) -> int:
        # requests sends Content-Length = len - tell(); RawIOBase's tell() would raise, and
        # requests then falls back to chunked encoding
        return self._sent

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = CHUNK if size is None or size < 0 else size
        out = b""
        if self._head:
            out, self._head = self._head[:size], self._head[size:]
        if len(out) < size:
            out += self._file.read(size - len(out))
        if len(out) < size and self._tail:
            take = size - len(out)
            out, self._tail = out + self._tail[:take], self._tail[take:]
        self._sent += len(out)
        if self._progress and out:
            self._progress(self._sent, self._size)
        return out

    def close(self) -> None:
        self._file.close()
        super().close()


def save_stream(
    chunks: Iterable[bytes], dest: Path, total: int | None, progress: Progress | None = None
) -> Path:
    """Write chunks to `dest` through a temporary name, so a broken transfer leaves no file
    that looks whole."""
    tmp = dest.with_name(f".{dest.name}.part")
    try:
        with open(tmp, "wb") as fh:
            for chunk in _counted(chunks, total, progress):
                fh.write(chunk)
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


class _ChunkReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks (what tarfile's stream mode reads)."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks, self._rest = chunks, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._rest:
            try:
                self._rest = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._rest))
        buffer[:n], self._rest = self._rest[:n], self._rest[n:]
        return n


def _file_chunks(fh) -> Iterator[bytes]:
    while chunk := fh.read(CHUNK):
        yield chunk


def adapter_member(name: str) -> str | None:
    """The file name inside the adapter directory of a checkpoint tar member, or None.
    A member is `<top>/adapter/<file>` (a checkpoint directory) or `<top>/<file>` (a
    checkpoint that is an adapter directory itself: then only its adapter_* files count)."""
    parts = posixpath.normpath(name).split("/")
    if name.startswith("/") or ".." in parts:
        return None
    if len(parts) == 3 and parts[1] == ADAPTER_DIR:
        return parts[2]
    if len(parts) == 2 and parts[1].startswith("adapter_"):
        return parts[1]
    return None


def adapter_extract(
    chunks: Iterable[bytes], dest: Path, total: int | None, progress: Progress | None = None
) -> Path:
    """Unpack the adapter of a streamed checkpoint tar into the directory `dest`; the rest
    (optimizer, RNG, buffer) streams past unwritten."""
    dest.mkdir(parents=True, exist_ok=True)
    stream = io.BufferedReader(_ChunkReader(iter(_counted(chunks, total, progress))), CHUNK)
    written = []
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                name = adapter_member(member.name) if member.isfile() else None
                if name is None:
                    continue
                save_stream(_file_chunks(tar.extractfile(member)), dest / name, None)
                written.append(name)
    except tarfile.ReadError:
        raise TransferError("the checkpoint is a single file, not a directory") from None
    missing = [f for f in ADAPTER_FILES if f not in written]
    if missing:
        raise TransferError(f"the checkpoint holds no PEFT adapter (no {', '.join(missing)})")
    return dest
