"""The one path guard of the platform and the workers (docs/security.md#paths).

A spec names paths (`model.path`, `data.path`, `data.eval_path`, `checkpoint.resume_from`,
`logging.tensorboard.dir`) that a job reads with the cluster's filesystem, and a job reports
checkpoint URIs that the platform then serves. Both sides read a path the same way here:

- `file_path`: a plain absolute path as written, or a `file://` URI (no host but `localhost`,
  percent-decoded); a `?` or `#` in a `file://` URI is refused, since a URL parser takes them
  for a query or a fragment while a glob takes `?` for a wildcard (the platform once checked
  one path and the job read another).
- `resolved`: the real path, every symbolic link followed (`os.path.realpath`), so a path is
  judged by where it leads, not by how it is spelt; `..` resolves too.
- `PathGuard`: the roots a run may read (its team's roots, the shared ones, its own folder),
  each resolved, and every path, glob match and file inside a directory checked to resolve
  inside one of them: a link out of a team's root is refused wherever it sits.

The platform checks at launch (experiments/spec_paths.py) and when a job reports a checkpoint
(live/ingest.py: inside that run's own folder); the job checks again where it reads, with the
roots its bootstrap reply gives. Standard library only.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = ["PathGuard", "PathRefused", "file_path", "inside", "resolved", "team_roots"]

MAX_FILES = 100_000  # files of a directory (or matches of a pattern) checked at most


class PathRefused(ValueError):
    """A path that is not a local absolute path, or leads outside the allowed roots."""


def file_path(value: str) -> str:
    """The local path `value` names: an absolute path as written, or a `file://` URI's path
    (host empty or localhost, percent-decoded). PathRefused for anything else."""
    if "://" in value:
        if "?" in value or "#" in value:
            raise PathRefused(f"{value}: a file:// URI with ? or #: write the path itself")
        parts = urlsplit(value)
        if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
            raise PathRefused(f"{value}: a local path or a file:// URI")
        value = unquote(parts.path)
    if not value.startswith("/") or "\0" in value:
        raise PathRefused(f"{value}: an absolute path")
    return value


def resolved(path: str) -> str:
    """The real path: links followed, `..` and `.` gone (what exists of it resolved)."""
    return os.path.realpath(path)


def inside(path: str, root: str) -> bool:
    """Whether `path` (resolved) lies in `root` (resolved) or is it."""
    path, root = resolved(path), resolved(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def team_roots(roots: Iterable[str], team_id: int) -> list[str]:
    """Roots of a setting with `{team}` replaced by the team's id: `/srv/data/{team}` is a
    root per team; a root without it is shared by every team."""
    return [str(r).replace("{team}", str(team_id)) for r in roots if str(r)]


@dataclass(frozen=True)
class PathGuard:
    """The roots a run may read. `check` and `files` raise PathRefused for a path that
    leads anywhere else."""

    roots: tuple[str, ...]

    def allows(self, path: str) -> bool:
        return any(inside(path, root) for root in self.roots)

    def check(self, value: str, field: str) -> str:
        """`value`'s local path, when it resolves inside a root; with glob characters, every
        match must (and the pattern's fixed part too)."""
        path = file_path(value)
        fixed = path if not glob.has_magic(path) else _fixed_part(path)
        if not self.allows(fixed):
            raise PathRefused(f"{field}: {value} lies outside the run's allowed roots")
        if glob.has_magic(path):
            for match in _bounded(glob.iglob(path), field):
                self._file(match, value, field)
        elif os.path.isdir(path):
            self.tree(path, field, value)
        return path

    def tree(self, directory: str, field: str, value: str | None = None) -> None:
        """Every file and folder inside `directory` resolves inside a root (a link inside a
        team's folder must not lead out of it)."""
        for root, dirs, files in _bounded_walk(directory, field):
            for name in [*dirs, *files]:
                self._file(os.path.join(root, name), value or directory, field)

    def _file(self, path: str, value: str, field: str) -> None:
        if not self.allows(path):
            raise PathRefused(f"{field}: {value} leads outside the run's allowed roots")


def _fixed_part(pattern: str) -> str:
    """The folders of a glob pattern before its first wildcard."""
    parts = Path(pattern).parts
    fixed = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return str(Path(*fixed)) if fixed else "/"


def _bounded(paths: Iterable[str], field: str) -> Iterable[str]:
    for i, path in enumerate(paths):
        if i >= MAX_FILES:
            raise PathRefused(f"{field}: more than {MAX_FILES} files")
        yield path


def _bounded_walk(directory: str, field: str):
    seen = 0
    for root, dirs, files in os.walk(directory):  # links to folders are not descended into
        seen += len(dirs) + len(files)
        if seen > MAX_FILES:
            raise PathRefused(f"{field}: {directory} holds more than {MAX_FILES} files")
        yield root, dirs, files
