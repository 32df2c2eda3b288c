"""The client's byte transfers on their own: a multipart body whose announced length is
what it sends, a checkpoint tar of which only the adapter is written (never a path that
climbs out of the destination), and no half file left when a download breaks."""

from __future__ import annotations

import io
import tarfile

import pytest
import requests

from paddock_client.transfer import (
    MultipartFile,
    TransferError,
    adapter_extract,
    adapter_member,
    save_stream,
)


def _tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _chunks(data: bytes, size: int = 1000):
    return (data[i : i + size] for i in range(0, len(data), size))


def test_multipart_length_is_what_is_sent_and_requests_uses_it(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"q": 1}\n' * 5000)
    seen = []
    body = MultipartFile({"team": "3", "name": "rows"}, "file", path, lambda d, t: seen.append(d))
    prepared = requests.Request(
        "POST", "http://x/", data=body, headers={"Content-Type": body.content_type}
    ).prepare()
    assert prepared.headers["Content-Length"] == str(len(body))
    assert "Transfer-Encoding" not in prepared.headers
    sent = b"".join(iter(lambda: body.read(8192), b""))
    body.close()
    assert len(sent) == len(body) and sent.endswith(f"--{body.boundary}--\r\n".encode())
    assert b'name="team"\r\n\r\n3\r\n' in sent and path.read_bytes() in sent
    assert seen[-1] == len(body)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("run1-step4/adapter/adapter_config.json", "adapter_config.json"),
        ("run1-step4/adapter/paddock_adapter.json", "paddock_adapter.json"),
        ("run1-step4/adapter_model.safetensors", "adapter_model.safetensors"),
        ("run1-step4/optimizer.pt", None),
        ("run1-step4/adapter/../../etc/passwd", None),
        ("/etc/adapter/adapter_config.json", None),
        ("run1-step4/adapter/sub/adapter_config.json", None),
    ],
)
def test_which_members_are_the_adapter(name, expected):
    assert adapter_member(name) == expected


def test_only_the_adapter_is_written(tmp_path):
    data = _tar({
        "r/adapter/adapter_config.json": b"{}",
        "r/adapter/adapter_model.safetensors": b"W" * 5000,
        "r/optimizer.pt": b"O" * 9000,
        "r/adapter/../../x": b"!",
    })  # fmt: skip
    progress = []
    dest = adapter_extract(
        _chunks(data), tmp_path / "a", len(data), lambda d, t: progress.append(d)
    )
    assert sorted(p.name for p in dest.iterdir()) == ["adapter_config.json",
                                                      "adapter_model.safetensors"]  # fmt: skip
    assert (dest / "adapter_model.safetensors").read_bytes() == b"W" * 5000
    assert not (tmp_path / "x").exists() and progress[-1] == len(data)
    with pytest.raises(TransferError, match="no PEFT adapter"):
        adapter_extract(_chunks(_tar({"r/optimizer.pt": b"O"})), tmp_path / "b", None)
    with pytest.raises(TransferError, match="single file"):
        adapter_extract(_chunks(b"not a tar at all" * 100), tmp_path / "c", None)


def test_a_broken_download_leaves_no_file(tmp_path):
    def broken():
        yield b"partial"
        raise requests.ConnectionError("reset")

    with pytest.raises(requests.ConnectionError):
        save_stream(broken(), tmp_path / "run.csv", None)
    assert list(tmp_path.iterdir()) == []
