"""A config is data: no field reaches eval, exec, an unpickler or an import of a name the
user gave; remote code is never trusted; paths stay inside allowed roots."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from paddock.experiments.models import Run
from paddock.teams.models import Role
from tests.platform.conftest import TINY_SPEC, launch
from workers.spec import spec_errors

REPO = Path(__file__).resolve().parents[2]
DANGEROUS = re.compile(
    r"(?<![.\w])(eval|exec|__import__|compile)\(|pickle\.loads?\(|cloudpickle|marshal\.loads?"
    r"|dill\.|yaml\.(unsafe_)?load\(|import_module\(|torch\.load\(|shell=True"
)
# every use there is, and why it is safe; a new one fails the test until it is looked at
ALLOWED = {
    ("workers/rollout/registry.py", "import_module("): "the module name comes from the fixed "
    "BACKENDS table, looked up after RunSpec has limited rollout.backend to its keys",
    ("workers/loop/checkpoint.py", "torch.load("): "a checkpoint of the run's own team "
    "(spec_paths_check refuses any other checkpoint.resume_from at launch), every file read "
    "with weights_only=True (tensors, plain values and the loop's own dataclasses by name)",
}


def _hits() -> set[tuple[str, str]]:
    found = set()
    for root in ("workers", "platform"):
        for path in (REPO / root).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for line in path.read_text().splitlines():
                code = line.split("#", 1)[0]
                for match in DANGEROUS.finditer(code):
                    found.add((str(path.relative_to(REPO)), match.group(0)))
    return found


def test_no_code_runs_from_data_except_where_reviewed():
    hits = _hits()
    assert hits <= set(ALLOWED), sorted(hits - set(ALLOWED))
    assert hits, "the scan found nothing: has the layout moved?"


def test_the_scan_would_see_a_new_call():
    assert DANGEROUS.search("obj = pickle.loads(blob)")
    assert DANGEROUS.search("x = eval(text)") and not DANGEROUS.search("model.eval()")
    assert DANGEROUS.search("importlib.import_module(spec.reward.name)")


def test_trust_remote_code_is_refused_by_the_spec():
    errors = spec_errors({"model": {"trust_remote_code": True}})
    assert [e["field"] for e in errors] == ["model.trust_remote_code"]
    assert spec_errors({"model": {"trust_remote_code": False}}) == []


def test_a_rollout_backend_is_one_of_the_registry(world):
    errors = spec_errors({"rollout": {"backend": "os.system"}})
    assert errors and errors[0]["field"].startswith("rollout")


def _launch(client, team, **sections):
    return launch(client, team, spec={**TINY_SPEC, **sections})


@pytest.fixture
def roots(settings, tmp_path):
    settings.PADDOCK_ARTIFACTS_URI = (tmp_path / "artifacts").as_uri()
    settings.PADDOCK_MODEL_ROOTS = [str(tmp_path / "models")]
    settings.PADDOCK_DATA_ROOTS = [str(tmp_path / "data")]
    return tmp_path


@pytest.mark.parametrize(
    ("section", "value", "field"),
    [
        ("model", {"path": "/etc"}, "spec.model.path"),
        ("model", {"path": "{root}/models/../../etc"}, "spec.model.path"),
        ("model", {"path": "relative/model"}, "spec.model.path"),
        ("model", {"path": "{root}/models-evil/x"}, "spec.model.path"),
        ("data", {"task": "jsonl", "path": "/etc/passwd"}, "spec.data.path"),
        (
            "data",
            {"task": "jsonl", "path": "{root}/data/a.jsonl", "eval_path": "file:///etc/shadow"},
            "spec.data.eval_path",
        ),  # fmt: skip
        ("data", {"task": "jsonl", "path": "s3://bucket/x.jsonl"}, "spec.data.path"),
        ("data", {"task": "jsonl", "path": "{team_b}/datasets/x.jsonl"}, "spec.data.path"),
        ("checkpoint", {"resume_from": "/tmp/evil"}, "spec.checkpoint.resume_from"),
        ("checkpoint", {"resume_from": "{runs}/{b_run}/step-1"}, "spec.checkpoint.resume_from"),
        (
            "checkpoint",
            {"resume_from": "{runs}/{a_run}/../{b_run}"},
            "spec.checkpoint.resume_from",
        ),  # fmt: skip
    ],
)
def test_paths_outside_the_allowed_roots_are_refused(
    world, client_as, launched, roots, section, value, field
):
    fill = {
        "root": roots, "team_b": roots / "artifacts" / "teams" / str(world.team_b.pk),
        "runs": (roots / "artifacts" / "runs").as_uri(),
        "a_run": launched[0]["runs"][0]["id"], "b_run": launched[1]["runs"][0]["id"],
    }  # fmt: skip
    value = {k: v.format(**fill) for k, v in value.items()}
    before = Run.objects.count()
    reply = _launch(client_as(world.users_a[Role.OWNER]), world.team_a, **{section: value})
    assert reply.status_code == 400, reply.json()
    assert reply.json()["code"] == "path_not_allowed"
    assert reply.json()["field"] == field
    assert Run.objects.count() == before


def test_paths_inside_the_allowed_roots_launch(world, client_as, launched, roots):
    client = client_as(world.users_a[Role.OWNER])
    own = roots / "artifacts" / "teams" / str(world.team_a.pk) / "datasets" / "d.jsonl"
    a_run = launched[0]["runs"][0]["id"]
    for sections in (
        {"model": {"path": str(roots / "models" / "qwen")}},
        {"data": {"task": "jsonl", "path": str(own), "eval_path": own.as_uri()}},
        {"data": {"task": "jsonl", "path": str(roots / "data" / "sub" / "a.jsonl")}},
        {"checkpoint": {"resume_from": f"{(roots / 'artifacts' / 'runs').as_uri()}/{a_run}/s"}},
        {"checkpoint": {"resume_from": "latest"}},
    ):
        reply = _launch(client, world.team_a, **sections)
        assert reply.status_code == 201, (sections, reply.json())
