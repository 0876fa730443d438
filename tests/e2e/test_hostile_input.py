"""Schemathesis against the live OpenAPI schema of a running `gpuq serve`, and hand-made
hostile requests: no 5xx, and no response that breaks the schema."""

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from service.api.app import create_app
from service.settings import Settings
from tests.conftest import job_spec
from tests.e2e.server import Server

pytestmark = pytest.mark.e2e


def _tar(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, body in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return out.getvalue()


#: `POST /v1/snapshots` takes a tar: real ones (one escaping with `..`) and any bytes at all.
schemathesis.openapi.media_type(
    "application/x-tar",
    st.one_of(
        st.sampled_from([_tar({"train.py": b"print(1)"}), _tar({"../out": b"x"}), b""]),
        st.binary(max_size=2048),
    ),
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("hostile") / "gpuq")
    server.start("--api-only")  # accepted jobs stay queued: nothing trains
    yield server
    server.kill()


#: What counts as rejecting invalid data: schemathesis's own list, and 413 for a generated
#: body over gpuq's 1 MiB limit (`test_a_body_over_one_mebibyte_is_413_even_without_a_length`).
REJECTED = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]


@pytest.fixture(scope="module")
def live_schema(live: Server) -> schemathesis.BaseSchema:
    checks = {"negative_data_rejection": {"expected-statuses": [*REJECTED, "5xx"]}}
    config = SchemathesisConfig.from_dict({"checks": checks})
    return schemathesis.openapi.from_url(f"{live.url}/openapi.json", config=config)


#: An endless stream cannot be validated as one response: `test_live_updates` covers it.
ENDLESS = {"/v1/events"}


def _cases() -> list[tuple[str, str, GenerationMode]]:
    """(method, path, mode) for every route, from the app's schema at collection time.

    Invalid data can only be made for routes that take some input."""
    schema = create_app(Settings(gpus="sim:1")).openapi()
    cases = []
    for path, methods in schema["paths"].items():
        if path in ENDLESS:
            continue
        for method, operation in methods.items():
            # A free-form header (Authorization) has no invalid values to generate.
            params = [p for p in operation.get("parameters", []) if p["in"] != "header"]
            takes_input = params or operation.get("requestBody")
            for mode in GenerationMode:
                if takes_input or mode == GenerationMode.POSITIVE:
                    cases.append((method.upper(), path, mode))
    return cases


def bounded(case: schemathesis.Case) -> None:
    """Keeps a valid request from waiting on purpose: this server's jobs stay queued, so a
    long poll would wait its whole `wait_s` and a followed log would never end. Both have
    their own tests (`test_long_poll`, `test_live_updates`, `test_cli`)."""
    query = case.query or {}
    if isinstance(query.get("wait_s"), int | float) and not isinstance(query["wait_s"], bool):
        query["wait_s"] = min(query["wait_s"], 0.2)
    if query.get("follow") in (True, "true"):
        query["follow"] = False


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.mark.parametrize(("method", "path", "mode"), _cases(), ids=str)
def test_generated_requests_get_no_5xx_and_match_the_schema(live_schema, method, path, mode):
    operation = live_schema[path][method]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def exercise(case: schemathesis.Case) -> None:
        bounded(case)
        case.call_and_validate(checks=CHECKS)

    exercise()


def post_raw(live: Server, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{live.url}/v1/jobs", content=body, headers={"Content-Type": "application/json", **headers}
    )


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b"[]",
        b"null",
        b'"job"',
        b"\xff\xfe",
        b'{"keras": {"epochs": 1e400}}',
        b'{"keras": {"learning_rate": NaN}}',
        b'{"priority": 99999999999999999999999999999999}',
        b"{" * 10_000 + b"}" * 10_000,
    ],
)
def test_malformed_bodies_are_4xx(live, body):
    response = post_raw(live, body)
    assert 400 <= response.status_code < 500, response.text
    assert "detail" in response.json()


def test_a_body_over_one_mebibyte_is_413_even_without_a_length(live):
    def chunks() -> Iterator[bytes]:
        yield b'{"name": "'
        for _ in range(300):
            yield b"x" * 4096
        yield b'"}'

    response = httpx.post(
        f"{live.url}/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/tmp/../etc/passwd", "must not contain '..' segments"),
        ("/tmp/a\x00b.npz", "must not contain NUL characters"),
        ("relative/data.npz", "must be an absolute path"),
        ("/etc", "does not exist or is not a file"),
    ],
)
def test_path_tricks_in_data_paths_are_refused(live, path, words):
    spec = job_spec(keras={"data": {"source": "npz", "path": path}})
    response = httpx.post(f"{live.url}/v1/jobs", json=spec)
    assert response.status_code == 422
    assert words in response.text


def test_path_tricks_in_a_command_are_refused(live, tmp_path: Path):
    spec = {
        "kind": "command",
        "resources": {"gpus": 0},
        "command": {"argv": ["/usr/bin/../bin/true"], "workdir": str(tmp_path)},
    }
    response = httpx.post(f"{live.url}/v1/jobs", json=spec)
    assert response.status_code == 422
    assert "must not contain '..' segments" in response.text


@pytest.mark.parametrize(
    "path",
    [
        "/v1/jobs/1/logs?tail=-1",
        "/v1/jobs/1/logs?offset=-5",
        f"/v1/jobs/1/logs?offset={2**64}",
        "/v1/jobs/%2e%2e/logs",
        "/v1/jobs/1%00/logs",
        "/v1/gpus/99999/release",
    ],
)
def test_log_and_gpu_path_tricks_are_4xx(live, path):
    method = "POST" if path.endswith("release") else "GET"
    response = httpx.request(method, f"{live.url}{path}")
    assert 400 <= response.status_code < 500
