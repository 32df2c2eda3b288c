"""Paths (docs/security.md#paths): one guard (workers/path_guard.py) on both sides. A path is
read the same way by the platform and the job (a `file://` URI with `?` or `#` refused),
judged by where it leads (links followed), and must lie under the run's own team root: at
launch, in the job where it reads (every file of a directory and match of a pattern), and for
a checkpoint a job reports or the platform serves (inside that run's own folder)."""

from __future__ import annotations

import json

import pytest

from paddock.clusters.bootstrap_tokens import bootstrap_exchange, bootstrap_token_for
from paddock.clusters.dispatch import dispatch_prepare
from paddock.experiments.launch import experiment_launch
from paddock.experiments.models import Checkpoint, Run
from paddock.experiments.tokens import run_token_mint
from paddock.teams.models import Role
from tests.platform.conftest import TINY_SPEC, launch
from workers.data.tasks import read_examples
from workers.path_guard import PathGuard, PathRefused, file_path

ROWS = "".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(4))


@pytest.fixture
def roots(settings, tmp_path, world):
    """Per-team data roots (the default's shape), each team with a file of its own."""
    settings.PADDOCK_ARTIFACTS_URI = (tmp_path / "artifacts").as_uri()
    settings.PADDOCK_DATA_ROOTS = [str(tmp_path / "data" / "{team}")]
    settings.PADDOCK_MODEL_ROOTS = [str(tmp_path / "models")]
    for team in (world.team_a, world.team_b):
        folder = tmp_path / "data" / str(team.pk)
        folder.mkdir(parents=True)
        (folder / "rows.jsonl").write_text(ROWS)
    return tmp_path


def _data(path: str) -> dict:
    return {**TINY_SPEC, "data": {"task": "dataset", "path": path}}


def test_a_launch_reads_only_its_own_teams_root(world, client_as, roots):
    a, b = roots / "data" / str(world.team_a.pk), roots / "data" / str(world.team_b.pk)
    (a / "to-b").symlink_to(b)  # a link inside A's root, into B's
    (a / "b-rows.jsonl").symlink_to(b / "rows.jsonl")
    member = client_as(world.users_a[Role.MEMBER])
    assert launch(member, world.team_a, spec=_data(str(a / "rows.jsonl"))).status_code == 201
    for path in (
        str(b / "rows.jsonl"),  # another team's root
        f"{a}/../{world.team_b.pk}/rows.jsonl",  # .. out of it
        str(a / "to-b" / "rows.jsonl"),  # a folder link out
        str(a / "b-rows.jsonl"),  # a file link out
        f"{(a / 'rows.jsonl').as_uri()}?/../../{world.team_b.pk}/rows.jsonl",  # ? of a URI
        f"{(a / 'rows.jsonl').as_uri()}#x",
        f"{a}/../*/rows.jsonl",  # a pattern reaching out
    ):
        reply = launch(member, world.team_a, spec=_data(path))
        assert reply.status_code == 400, (path, reply.json())
        assert (reply.json()["code"], reply.json()["field"]) == (
            "path_not_allowed", "spec.data.path"), path  # fmt: skip


def test_the_job_reads_only_inside_its_roots(roots, world):
    a, b = roots / "data" / str(world.team_a.pk), roots / "data" / str(world.team_b.pk)
    guard = PathGuard((str(a),))
    assert len(read_examples(str(a / "rows.jsonl"), guard=guard)) == 4
    (a / "shards").mkdir()
    (a / "shards" / "train-0.jsonl").write_text(ROWS)
    assert len(read_examples(str(a / "shards" / "train-*.jsonl"), guard=guard)) == 4
    # a match of a pattern that leads out, a folder holding a link out, a ?/# URI
    (a / "shards" / "train-1.jsonl").symlink_to(b / "rows.jsonl")
    with pytest.raises(ValueError, match="leads outside the run's allowed roots"):
        read_examples(str(a / "shards" / "train-*.jsonl"), guard=guard)
    with pytest.raises(ValueError, match="leads outside the run's allowed roots"):
        read_examples(str(a / "shards"), fmt="jsonl", guard=guard)
    for path in (str(b / "rows.jsonl"), f"{(a / 'rows.jsonl').as_uri()}?x"):
        with pytest.raises(ValueError, match=r"data\.path"):
            read_examples(path, guard=guard)


def test_file_uris_are_read_one_way():
    assert file_path("file:///srv/data/a%20b.jsonl") == "/srv/data/a b.jsonl"
    assert file_path("file://localhost/srv/x") == file_path("/srv/x") == "/srv/x"
    for bad in ("file:///srv/x?y", "file:///srv/x#y", "file://host/srv/x", "s3://b/x", "rel/x",
                "/srv/\0x"):  # fmt: skip
        with pytest.raises(PathRefused):
            file_path(bad)


@pytest.mark.usefixtures("quiet_hooks")
def test_the_bootstrap_gives_the_job_its_own_roots(roots, world):
    run = experiment_launch(actor=world.actor(world.users_a[Role.MEMBER]), team=world.team_a,
                            name="e", spec=TINY_SPEC).runs[0]  # fmt: skip
    dispatch_prepare(run_id=run.pk)
    run.refresh_from_db()
    raw = bootstrap_token_for(run_id=run.pk, dispatch=run.dispatch_count)
    reply = bootstrap_exchange(run_id=run.pk, dispatch=run.dispatch_count, raw=raw)
    store = roots / "artifacts"
    assert reply.read_roots == [
        str(roots / "models"), str(roots / "data" / str(world.team_a.pk)),
        f"{store}/teams/{world.team_a.pk}", f"{store}/runs/{run.pk}",
    ]  # fmt: skip


def _job(run: Run) -> str:
    Run.objects.filter(pk=run.pk).update(dispatch_count=1)
    return run_token_mint(run=run, dispatch=1)


def _ingest(client, run, token, uri):
    body = {"dispatch": 1, "seq": 1, "events": [
        {"type": "checkpoint", "step": 1, "uri": uri, "adapter_version": 1}]}  # fmt: skip
    return client.post(f"/api/v1/runs/{run.pk}/ingest", body, content_type="application/json",
                       HTTP_AUTHORIZATION=f"Bearer {token}")  # fmt: skip


@pytest.mark.usefixtures("quiet_hooks")
def test_a_job_reports_and_the_platform_serves_only_its_own_runs_checkpoints(
    roots, world, client, client_as
):
    mine = experiment_launch(actor=world.actor(world.users_a[Role.MEMBER]), team=world.team_a,
                             name="a", spec=TINY_SPEC).runs[0]  # fmt: skip
    theirs = experiment_launch(actor=world.actor(world.users_b[Role.MEMBER]),
                               team=world.team_b, name="b", spec=TINY_SPEC).runs[0]  # fmt: skip
    runs = roots / "artifacts" / "runs"
    (runs / str(theirs.pk) / "step-1").mkdir(parents=True)
    (runs / str(theirs.pk) / "step-1" / "adapter.bin").write_bytes(b"team b's weights")
    (runs / str(mine.pk)).mkdir(parents=True)
    (runs / str(mine.pk) / "step-1").symlink_to(runs / str(theirs.pk) / "step-1")
    token = _job(mine)
    for uri in ((runs / str(theirs.pk) / "step-1").as_uri(),  # another team's run
                (runs / str(mine.pk) / "step-1").as_uri()):  # a link into it  # fmt: skip
        reply = _ingest(client, mine, token, uri)
        assert (reply.status_code, reply.json()["field"]) == (400, "events.0.uri"), uri
    assert not Checkpoint.objects.filter(run=mine).exists()
    # a folder of its own holding a link out is not served either
    (runs / str(mine.pk) / "step-2").mkdir()
    (runs / str(mine.pk) / "step-2" / "adapter.bin").symlink_to(
        runs / str(theirs.pk) / "step-1" / "adapter.bin"
    )
    reply = _ingest(client, mine, token, (runs / str(mine.pk) / "step-2").as_uri())
    assert reply.status_code == 200, reply.json()
    checkpoint = Checkpoint.objects.get(run=mine)
    got = client_as(world.users_a[Role.OWNER]).get(
        f"/api/v1/runs/{mine.pk}/checkpoints/{checkpoint.pk}/download"
    )
    assert (got.status_code, got.json()["code"]) == (404, "artifact_outside_store")
