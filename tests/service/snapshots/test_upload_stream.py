"""An upload is read as a stream: one over GPUQ_SNAPSHOT_MAX_MB is refused as soon as it
passes the limit, with no Content-Length to go by, and the rest of it is never read."""

import asyncio
import json

import pytest

from service.team import users
from tests.service.snapshots.tars import make_tar, sha, store_entries

MIB = 1024 * 1024
CHUNK = 64 * 1024


@pytest.fixture
def settings(settings):
    return settings.model_copy(update={"snapshot_max_mb": 1})


def post(app, token: str, chunks, *, length: int | None = None) -> tuple[int, dict, int]:
    """POSTs `chunks` to /v1/snapshots straight into the ASGI app: the status, the JSON
    answer and how many bytes of the body the app read."""
    headers = [
        (b"host", b"127.0.0.1"),
        (b"authorization", f"Bearer {token}".encode()),
        (b"content-type", b"application/x-tar"),
    ]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/snapshots",
        "raw_path": b"/v1/snapshots",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    read = 0
    answer: dict = {}
    body = bytearray()

    async def receive() -> dict:
        nonlocal read
        chunk = next(chunks, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        read += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        elif message["type"] == "http.response.body":
            body.extend(message.get("body", b""))

    asyncio.run(app(scope, receive, send))
    return answer["status"], json.loads(body), read


def endless():
    while True:
        yield b"\0" * CHUNK


def test_an_endless_body_is_cut_off_just_past_the_limit(api, settings):
    token = users.add_user(api.app.state.service.db, "ana")
    status, answer, read = post(api.app, token, endless())
    assert status == 413
    assert "GPUQ_SNAPSHOT_MAX_MB (1 MiB)" in answer["detail"]
    assert MIB < read <= MIB + CHUNK, "read no further than the chunk that passed the limit"
    assert store_entries(settings) == [], "its temporary file removed"


def test_a_length_over_the_limit_is_refused_before_reading(api, settings):
    token = users.add_user(api.app.state.service.db, "ana")
    status, answer, read = post(api.app, token, endless(), length=MIB + 1)
    assert (status, read) == (413, 0)
    assert "GPUQ_SNAPSHOT_MAX_MB" in answer["detail"]


def test_a_tar_in_many_chunks_is_stored_whole(api, settings):
    token = users.add_user(api.app.state.service.db, "ana")
    data = make_tar({f"f{i}.py": bytes([i]) * 5000 for i in range(100)})
    chunks = iter([data[i : i + 777] for i in range(0, len(data), 777)])
    status, answer, read = post(api.app, token, chunks)
    assert (status, answer["sha256"], answer["files"], read) == (201, sha(data), 100, len(data))
