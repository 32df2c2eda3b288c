"""Where a spec may point a job: model and dataset paths only inside allowed roots, resolved.

A job reads `model.path` and `data.path` / `data.eval_path` with the cluster's filesystem
and streams samples of what it read back to the browser, so a free path would let any
member read any file a job can (another team's dataset, a key on the cluster). A path must
be a local absolute path or a `file://` URI, read the same way as the job reads it
(workers/path_guard.py: no `?` or `#` in a URI), and resolve (links followed, `..` gone)
inside one of the run's roots: `settings.PADDOCK_MODEL_ROOTS` for models,
`settings.PADDOCK_DATA_ROOTS` or the team's own uploads for datasets. A root holding
`{team}` is one per team (`/srv/data/{team}`: team 7 reads `/srv/data/7`); a root without it
is shared by every team. The job checks again where it reads, every file of a directory and
every match of a pattern included, with the roots its bootstrap gives (`run_read_roots`).

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

from urllib.parse import urlsplit

from django.conf import settings

from paddock.core.errors import DomainError, ErrorCode
from paddock.experiments.artifacts import run_folder_uri, store_path
from paddock.experiments.models import Dataset, Run
from workers.path_guard import PathRefused, file_path, inside, resolved, team_roots
from workers.spec import dataset_ref


def _inside(value: str, roots: list[str]) -> bool:
    try:
        path = file_path(value)
    except PathRefused:
        return False
    return any(inside(path, root) for root in roots)


def _own_checkpoint(value: str, team_id: int) -> bool:
    store = store_path()
    try:
        path = resolved(file_path(value))
    except PathRefused:
        return False
    runs = resolved(f"{store}/runs") if store is not None else None
    if runs is None or not path.startswith(runs + "/"):
        return False
    run_id = path.removeprefix(runs + "/").split("/")[0]
    return run_id.isdigit() and Run.objects.filter(pk=int(run_id), team_id=team_id).exists()


def data_roots(team_id: int) -> list[str]:
    """Where a team's runs may read datasets: the data roots ({team} filled in) and the
    team's uploads (a directory store only)."""
    store = store_path()
    uploads = [f"{store}/teams/{team_id}"] if store is not None else []
    return [*team_roots(settings.PADDOCK_DATA_ROOTS, team_id), *uploads]


def model_roots(team_id: int) -> list[str]:
    return team_roots(settings.PADDOCK_MODEL_ROOTS, team_id)


def run_read_roots(run: Run) -> list[str]:
    """The roots a run's job may read (handed to it at bootstrap: its PathGuard): the model
    and data roots of its team, its team's uploads and its own folder."""
    store = store_path()
    own = [file_path(run_folder_uri(run.pk))] if store is not None else []
    return list(dict.fromkeys([*model_roots(run.team_id), *data_roots(run.team_id), *own]))


def spec_paths_check(*, team_id: int, spec: dict, field: str = "spec") -> None:
    """DomainError(ErrorCode.PATH_NOT_ALLOWED) naming every path of `spec` outside its roots."""
    errors = []
    model_path = spec.get("model", {}).get("path")
    if model_path and not _inside(model_path, model_roots(team_id)):
        errors.append(
            {"field": f"{field}.model.path",
             "message": f"must be inside one of {model_roots(team_id)} (links followed)"}
        )  # fmt: skip
    readable = data_roots(team_id)
    for key in ("path", "eval_path"):
        path = spec.get("data", {}).get(key)
        ref = dataset_ref(path)
        if ref is not None:
            if not Dataset.objects.filter(pk=ref, team_id=team_id).exists():
                errors.append(
                    {"field": f"{field}.data.{key}",
                     "message": f"no dataset {ref} among the team's uploads"}
                )  # fmt: skip
        elif path and not _inside(_pattern_folder(path), readable):
            shown = team_roots(settings.PADDOCK_DATA_ROOTS, team_id)
            errors.append(
                {"field": f"{field}.data.{key}",
                 "message": f"must be one of the team's datasets or inside {shown} (links "
                            "followed; a file:// URI without ? or #)"}
            )  # fmt: skip
    resume = spec.get("checkpoint", {}).get("resume_from")
    if resume and resume != "latest" and not _own_checkpoint(resume, team_id):
        errors.append(
            {"field": f"{field}.checkpoint.resume_from",
             "message": "must be 'latest' or a checkpoint of one of the team's runs"}
        )  # fmt: skip
    errors += _logging_errors(spec.get("logging") or {}, field, team_id)
    if errors:
        raise DomainError.of_errors(ErrorCode.PATH_NOT_ALLOWED, errors)


def _pattern_folder(value: str) -> str:
    """A path, or a pattern of shards cut before its first wildcard (the job checks every
    match it reads); a file:// URI keeps its ? and #, which file_path refuses."""
    if "://" in value:
        return value
    for i, char in enumerate(value):
        if char in "*?[":
            return value[: value.rfind("/", 0, i) + 1] or "/"
    return value


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


def _logging_errors(logging: dict, field: str, team_id: int) -> list[dict]:
    """The mirrors of `logging:` write where the platform allows: TensorBoard's directory
    inside the run's own output or `settings.PADDOCK_LOG_ROOTS`, MLflow only to a tracking
    server (a file: or sqlite: store would write anywhere on the cluster's disk)."""
    errors = []
    tb_dir = (logging.get("tensorboard") or {}).get("dir")
    log_roots = team_roots(settings.PADDOCK_LOG_ROOTS, team_id)
    if tb_dir is not None and not (_relative_inside(tb_dir) or _inside(tb_dir, log_roots)):
        roots = f" or inside one of {log_roots}" if log_roots else ""
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
