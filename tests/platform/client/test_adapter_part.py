"""GET /runs/{id}/checkpoints/{cid}/download?part=adapter: the PEFT adapter folder of a
checkpoint alone, as a tar (the optimizer, RNG and buffer state stay on the server); a
checkpoint without an adapter is a 404 saying so, an unknown part a 400 naming `part`."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from paddock.experiments.models import Checkpoint
from paddock.teams.models import Role

pytestmark = pytest.mark.usefixtures("quiet_hooks")


def _get(client, checkpoint, part):
    url = f"/api/v1/runs/{checkpoint.run_id}/checkpoints/{checkpoint.pk}/download?part={part}"
    return client.get(url)


@pytest.mark.django_db
def test_the_adapter_part_holds_the_adapter_alone(world, client_as, checkpointed):
    run_id, latest, saved = checkpointed
    viewer = client_as(world.users_a[Role.VIEWER])
    reply = _get(viewer, latest, "adapter")
    assert reply.status_code == 200 and reply["Content-Type"] == "application/x-tar"
    assert reply["Content-Disposition"] == f'attachment; filename="run{run_id}-step4-adapter.tar"'
    with tarfile.open(fileobj=io.BytesIO(b"".join(reply.streaming_content))) as tar:
        names = sorted(tar.getnames())
    top = f"run{run_id}-step4/adapter"
    on_disk = Path(latest.uri.removeprefix("file://")) / "adapter"
    assert names == sorted(f"{top}/{p.name}" for p in on_disk.iterdir())
    assert {f"{top}/adapter_config.json", f"{top}/adapter_model.safetensors"} <= set(names)
    whole = _get(viewer, latest, "all")
    with tarfile.open(fileobj=io.BytesIO(b"".join(whole.streaming_content))) as tar:
        assert f"run{run_id}-step4/optimizer.pt" in tar.getnames()
    assert _get(client_as(world.users_b[Role.OWNER]), latest, "adapter").status_code == 404


@pytest.mark.django_db
def test_no_adapter_or_a_bad_part(world, client_as, store, launched):
    run_id = launched[0]["runs"][0]["id"]
    bare = store / "runs" / str(run_id) / "bare"
    bare.mkdir(parents=True)
    (bare / "optimizer.pt").write_bytes(b"x")
    checkpoint = Checkpoint.objects.create(run_id=run_id, step=1, uri=bare.as_uri())
    member = client_as(world.users_a[Role.MEMBER])
    reply = _get(member, checkpoint, "adapter")
    assert (reply.status_code, reply.json()["code"]) == (404, "artifact_missing")
    assert "no PEFT adapter" in reply.json()["message"]
    reply = _get(member, checkpoint, "weights")
    assert (reply.status_code, reply.json()["field"]) == (400, "part")
