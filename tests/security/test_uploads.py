"""Request bodies (docs/security.md#limits): a dataset upload is streamed to disk and refused
at the limit while it arrives, never read into memory whole; every other body is held to the
JSON limit before Django's handler spools it. Driven through the ASGI application itself,
with a client that counts how much of its body was taken."""

from __future__ import annotations

import io

import pytest

from paddock.asgi import application
from paddock.experiments.artifacts import dataset_upload
from paddock.experiments.models import Dataset
from paddock.teams.models import Role

MIB = 2**20


class Sender:
    """An endless body in 1 MiB chunks (or `total` bytes), counting the chunks taken."""

    def __init__(self, total: int | None = None):
        self.total, self.taken = total, 0

    async def receive(self):
        self.taken += 1
        sent = self.taken * MIB
        more = self.total is None or sent < self.total
        return {"type": "http.request", "body": b"x" * MIB, "more_body": more}


async def _post(path: str, sender: Sender, headers: list[tuple[bytes, bytes]]) -> int:
    scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(),
             "query_string": b"", "scheme": "http", "server": ("127.0.0.1", 8000),
             "client": ("127.0.0.1", 5000), "asgi": {"version": "3.0"}, "http_version": "1.1",
             "headers": [(b"host", b"127.0.0.1"), *headers]}  # fmt: skip
    answers = []

    async def send(message):
        answers.append(message)

    await application(scope, sender.receive, send)
    return next(m["status"] for m in answers if m["type"] == "http.response.start")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/api/v1/datasets", "/api/v1/experiments"])
async def test_a_body_past_its_cap_is_refused_while_it_arrives(settings, path):
    settings.PADDOCK_MAX_DATASET_BYTES = 2 * MIB
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2 * MIB
    endless = Sender()  # no Content-Length: the cap is found while it arrives
    assert (
        await _post(path, endless, [(b"content-type", b"multipart/form-data; boundary=x")]) == 413
    )
    assert endless.taken <= 4  # the 2 MiB cap and the form's room, not the endless rest
    declared = Sender()  # a length over the cap: refused before one chunk is read
    too_long = [(b"content-length", str(10**12).encode())]
    assert await _post(path, declared, too_long) == 413 and declared.taken == 0


class ChunkCounter(io.RawIOBase):
    """A file of `size` bytes of JSONL that records every read's size."""

    def __init__(self, size: int):
        row = b'{"prompt": "1+1=", "answer": "2"}\n'
        self.data = io.BytesIO(row * (size // len(row)))
        self.reads: list[int] = []

    def read(self, n: int = -1) -> bytes:
        self.reads.append(n)
        return self.data.read(n)


def test_an_upload_is_read_in_chunks_and_refused_at_the_limit(world, settings, tmp_path):
    settings.PADDOCK_ARTIFACTS_URI = (tmp_path / "artifacts").as_uri()
    actor = world.actor(world.users_a[Role.MEMBER])
    small = ChunkCounter(3 * MIB)
    dataset = dataset_upload(actor=actor, team=world.team_a, name="d", data=small)
    assert dataset.rows > 0 and all(0 < n <= MIB for n in small.reads)  # never all at once
    settings.PADDOCK_MAX_DATASET_BYTES = 2 * MIB
    big = ChunkCounter(50 * MIB)
    with pytest.raises(Exception, match="at most 2097152 bytes") as refused:
        dataset_upload(actor=actor, team=world.team_a, name="big", data=big)
    assert refused.value.code == "too_large"
    assert len(big.reads) <= 3  # stopped at the limit, not after the 50 MiB
    assert Dataset.objects.count() == 1
    assert not any((tmp_path / "artifacts" / "tmp").iterdir())  # no spool left behind
