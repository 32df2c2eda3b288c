"""Where a spec may point a job: model and dataset paths only inside allowed roots.

A job reads `model.path` and `data.path` / `data.eval_path` with the cluster's filesystem
and streams samples of what it read back to the browser, so a free path would let any
member read any file a job can (another team's dataset, a key on the cluster). A path must
be absolute, free of `..`, and inside one of `settings.PADDOCK_MODEL_ROOTS` (models) or
`settings.PADDOCK_DATA_ROOTS` or the team's own artifacts (datasets). The check is lexical:
the platform cannot see the cluster's disk, so the roots must not hold links leading out.

An uploaded dataset is named `dataset://<id>`: it must be one of the team's, and the job is
handed its artifact URI at bootstrap (`spec_datasets_resolve`), so the stored spec names the
dataset, not a place in one store, and a run on any cluster reads what was uploaded.

`checkpoint.resume_from` matters most: a job unpickles a checkpoint's buffer and RNG
state, so a path of the user's choosing would run code of the user's choosing. It may only
name a checkpoint of one of the team's own runs in the artifact store, which only the
team's jobs write (or `latest`, the run's own output directory).

The metric mirrors of `logging:` write too: TensorBoard's directory must stay inside the
run's output or `settings.PADDOCK_LOG_ROOTS`, and MLflow gets a tracking server only.
"""

from __future__ import annotations

import posixpath
from urllib.parse import unquote, urlsplit

from django.conf import settings

from paddock.core.errors import DomainError, ErrorCode
from paddock.experiments.models import Dataset, Run
from workers.spec import dataset_ref


def _local(path: str) -> str | None:
    """`path` (or a file:// URI) as a normalized absolute path; None when it is relative,
    climbs with `..` or names another scheme."""
    if "://" in path:
        parts = urlsplit(path)
        if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
            return None
        path = unquote(parts.path)
    if not path.startswith("/") or ".." in path.split("/") or "\0" in path:
        return None
    return posixpath.normpath(path)


def _inside(path: str, roots: list[str]) -> bool:
    local = _local(path)
    if local is None:
        return False
    for root in roots:
        root = _local(str(root))
        if root is not None and (local == root or local.startswith(root.rstrip("/") + "/")):
            return True
    return False


def _own_checkpoint(path: str, team_id: int) -> bool:
    runs = f"{settings.PADDOCK_ARTIFACTS_URI.rstrip('/')}/runs"
    local, root = _local(path), _local(runs)
    if local is None or root is None or not local.startswith(root + "/"):
        return False
    run_id = local.removeprefix(root + "/").split("/")[0]
    return run_id.isdigit() and Run.objects.filter(pk=int(run_id), team_id=team_id).exists()


def team_artifacts_root(team_id: int) -> str:
    return f"{settings.PADDOCK_ARTIFACTS_URI.rstrip('/')}/teams/{team_id}"


def spec_paths_check(*, team_id: int, spec: dict, field: str = "spec") -> None:
    """DomainError(ErrorCode.PATH_NOT_ALLOWED) naming every path of `spec` outside its roots."""
    errors = []
    model_path = spec.get("model", {}).get("path")
    if model_path and not _inside(model_path, settings.PADDOCK_MODEL_ROOTS):
        errors.append(
            {"field": f"{field}.model.path",
             "message": f"must be inside one of {settings.PADDOCK_MODEL_ROOTS}"}
        )  # fmt: skip
    data_roots = [*settings.PADDOCK_DATA_ROOTS, team_artifacts_root(team_id)]
    for key in ("path", "eval_path"):
        path = spec.get("data", {}).get(key)
        ref = dataset_ref(path)
        if ref is not None:
            if not Dataset.objects.filter(pk=ref, team_id=team_id).exists():
                errors.append(
                    {"field": f"{field}.data.{key}",
                     "message": f"no dataset {ref} among the team's uploads"}
                )  # fmt: skip
        elif path and not _inside(path, data_roots):
            errors.append(
                {"field": f"{field}.data.{key}",
                 "message": f"must be one of the team's datasets or inside {data_roots[:-1]}"}
            )  # fmt: skip
    resume = spec.get("checkpoint", {}).get("resume_from")
    if resume and resume != "latest" and not _own_checkpoint(resume, team_id):
        errors.append(
            {"field": f"{field}.checkpoint.resume_from",
             "message": "must be 'latest' or a checkpoint of one of the team's runs"}
        )  # fmt: skip
    errors += _logging_errors(spec.get("logging") or {}, field)
    if errors:
        first = errors[0]
        raise DomainError(
            ErrorCode.PATH_NOT_ALLOWED,
            f"{first['field']}: {first['message']}",
            field=first["field"],
            errors=errors,
        )


def _relative_inside(path: str) -> bool:
    """A path that stays inside whatever directory it is joined to (the run's output)."""
    climbs = path.startswith(("/", "~")) or ".." in path.split("/")
    return bool(path) and not climbs and not any(bad in path for bad in ("\0", "\\", "://"))


def _tracking_server(uri: str) -> bool:
    try:
        parts = urlsplit(uri)
    except ValueError:  # e.g. an unclosed [IPv6 bracket
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def _logging_errors(logging: dict, field: str) -> list[dict]:
    """The mirrors of `logging:` write where the platform allows: TensorBoard's directory
    inside the run's own output or `settings.PADDOCK_LOG_ROOTS`, MLflow only to a tracking
    server (a file: or sqlite: store would write anywhere on the cluster's disk)."""
    errors = []
    tb_dir = (logging.get("tensorboard") or {}).get("dir")
    if tb_dir is not None and not (
        _relative_inside(tb_dir) or _inside(tb_dir, settings.PADDOCK_LOG_ROOTS)
    ):
        roots = (
            f" or inside one of {settings.PADDOCK_LOG_ROOTS}" if settings.PADDOCK_LOG_ROOTS else ""
        )
        errors.append(
            {"field": f"{field}.logging.tensorboard.dir",
             "message": f"must be relative to the run's output directory (no ..){roots}"}
        )  # fmt: skip
    uri = (logging.get("mlflow") or {}).get("tracking_uri")
    if uri is not None and not _tracking_server(uri):
        errors.append(
            {"field": f"{field}.logging.mlflow.tracking_uri",
             "message": "must be an http(s):// tracking server"}
        )  # fmt: skip
    return errors


def spec_datasets_resolve(*, team_id: int, spec: dict) -> dict:
    """`spec` with each `dataset://<id>` of the data section replaced by that upload's
    artifact URI, for the job. The team is checked again: a spec stored before a dataset
    was deleted must fail here, not read something else."""
    data = dict(spec.get("data") or {})
    for key in ("path", "eval_path"):
        ref = dataset_ref(data.get(key))
        if ref is None:
            continue
        dataset = Dataset.objects.filter(pk=ref, team_id=team_id).first()
        if dataset is None:
            raise DomainError(
                ErrorCode.DATASET_MISSING,
                f"data.{key}: dataset {ref} is not one of the team's uploads",
                field=f"spec.data.{key}",
            )
        data[key] = dataset.uri
    return {**spec, "data": data} if data else spec
