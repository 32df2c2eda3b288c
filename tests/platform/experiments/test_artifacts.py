"""Checkpoint downloads stream from the artifact store, and only from it; datasets are
checked, hashed and stored under the team."""

import io
import tarfile

import pytest

from paddock.experiments.artifacts import run_artifact_allowed
from paddock.experiments.models import Checkpoint, Dataset, Run
from paddock.teams.models import Role


@pytest.fixture
def store(settings, tmp_path):
    root = tmp_path / "artifacts"
    root.mkdir()
    settings.PADDOCK_ARTIFACTS_URI = root.as_uri()
    return root


@pytest.fixture
def run(launched) -> Run:
    return Run.objects.get(pk=launched[0]["runs"][0]["id"])


def _download(client, checkpoint):
    return client.get(f"/api/v1/runs/{checkpoint.run_id}/checkpoints/{checkpoint.pk}/download")


def test_a_checkpoint_directory_streams_as_a_tar(world, client_as, store, run):
    directory = store / "runs" / str(run.pk) / "step-10"
    (directory / "adapter").mkdir(parents=True)
    (directory / "adapter" / "adapter_model.safetensors").write_bytes(b"A" * 3000)
    (directory / "state.json").write_text('{"step": 10}')
    checkpoint = Checkpoint.objects.create(run=run, step=10, uri=directory.as_uri())
    reply = _download(client_as(world.users_a[Role.VIEWER]), checkpoint)
    assert reply.status_code == 200 and reply["Content-Type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(b"".join(reply.streaming_content))) as tar:
        names = sorted(tar.getnames())
        assert names == [f"run{run.pk}-step10/adapter/adapter_model.safetensors",
                         f"run{run.pk}-step10/state.json"]  # fmt: skip
        assert tar.extractfile(names[0]).read() == b"A" * 3000


@pytest.mark.django_db(transaction=True)
async def test_under_asgi_a_checkpoint_streams_a_piece_at_a_time(world, store, run):
    # Django's ASGI handler would read a synchronous iterator whole before sending a byte
    from asgiref.sync import sync_to_async
    from django.db import connections
    from django.test import AsyncClient

    directory = store / "runs" / str(run.pk) / "step-3"
    (directory / "adapter").mkdir(parents=True)
    (directory / "adapter" / "adapter_model.safetensors").write_bytes(b"B" * (3 << 20))
    checkpoint = await Checkpoint.objects.acreate(run=run, step=3, uri=directory.as_uri())
    client = AsyncClient()
    await client.aforce_login(world.users_a[Role.VIEWER])
    try:
        reply = await _download(client, checkpoint)
        assert reply.status_code == 200 and reply.is_async
        pieces = [piece async for piece in reply.streaming_content]
    finally:  # the request thread's connection, or the test database cannot be dropped
        await sync_to_async(connections.close_all)()
    assert len(pieces) > 1
    with tarfile.open(fileobj=io.BytesIO(b"".join(pieces))) as tar:
        (member,) = [m for m in tar.getmembers() if m.isfile()]
        assert tar.extractfile(member).read() == b"B" * (3 << 20)


@pytest.mark.parametrize("uri", ["file:///etc/passwd", "{root}/../secret", "s3://{root}/x"])
def test_nothing_outside_the_store_is_served(world, client_as, store, run, uri):
    (store.parent / "secret").write_text("no")
    checkpoint = Checkpoint.objects.create(run=run, step=1, uri=uri.format(root=store.as_uri()))
    reply = _download(client_as(world.users_a[Role.OWNER]), checkpoint)
    assert reply.status_code == 404
    assert reply.json()["code"] == "artifact_outside_store"


def test_uri_containment(store):
    root = store.as_uri()
    assert run_artifact_allowed(f"{root}/runs/1/ckpt", 1)
    assert not run_artifact_allowed(f"{root}/runs/1/ckpt", 2)  # another run's folder
    assert not run_artifact_allowed(f"{root}/runs/10/ckpt", 1)
    assert not run_artifact_allowed(f"{root}-other/x", 1)
    assert not run_artifact_allowed(f"{root}/runs/1/../../x", 1)
    assert not run_artifact_allowed(f"{root}/runs/1/ck?x#y", 1)


def test_a_vanished_checkpoint_is_a_clear_404(world, client_as, store, run):
    gone = store / "runs" / str(run.pk) / "gone"
    checkpoint = Checkpoint.objects.create(run=run, step=1, uri=gone.as_uri())
    reply = _download(client_as(world.users_a[Role.OWNER]), checkpoint)
    assert (reply.status_code, reply.json()["code"]) == (404, "artifact_missing")


def test_datasets_are_checked_hashed_and_stored_once(world, client_as, store):
    client = client_as(world.users_a[Role.MEMBER])
    data = b'{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2=", "answer": "4"}\n'

    def upload(content, name="math"):
        payload = {"team": world.team_a.pk, "name": name, "file": io.BytesIO(content)}
        return client.post("/api/v1/datasets", payload, format="multipart")

    first = upload(data)
    assert first.status_code == 201, first.json()
    body = first.json()
    assert body["rows"] == 2 and body["uri"].startswith(store.as_uri())
    assert (store / "teams" / str(world.team_a.pk) / "datasets" / f"{body['sha256']}.jsonl"
            ).read_bytes() == data  # fmt: skip
    assert upload(data, name="again").json()["id"] == body["id"]
    assert Dataset.objects.count() == 1
    bad = upload(b'"just a string"\n')
    assert (bad.status_code, bad.json()["field"]) == (400, "file")
    assert "line 1" in bad.json()["message"]
    viewer = client_as(world.users_b[Role.OWNER])
    assert viewer.get("/api/v1/datasets").json()["results"] == []
