"""Open mode (no user: every caller an admin) serves this machine only, request by request:
the last user revoked on a non-loopback bind closes the API, and a loopback gpuq answers
no `Host` but its own names (DNS rebinding), no proxy and no other site's page."""

import os
import pwd
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from gpuq.http import Client
from service.api.app import create_app
from service.api.local_socket import PEER_UID
from service.api.open_mode import names_this_machine
from service.runtime import open_api
from service.settings import Settings
from service.team import users
from tests.conftest import job_spec, serving
from tests.e2e.server import GPUQ, Server

FIRST_USER = "gpuq users add NAME --admin"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_revoking_the_last_user_on_a_network_bind_closes_the_api_to_every_request(settings):
    with serving(settings.model_copy(update={"host": "0.0.0.0"}), schedule=False) as api:
        db = api.app.state.service.db
        token = users.add_user(db, "ana", admin=True)
        assert api.get("/v1/jobs", headers=bearer(token)).status_code == 200
        users.revoke_user(db, "ana")
        for method, path in (("GET", "/v1/jobs"), ("POST", "/v1/jobs"), ("GET", "/v1/gpus")):
            refused = api.request(method, path, json=job_spec())
            assert refused.status_code == 403, (method, path, refused.text)
            detail = refused.json()["detail"]
            assert "no user exists" in detail and "0.0.0.0" in detail and FIRST_USER in detail
        # A user again, and tokens work again.
        token = users.add_user(db, "bo", admin=True)
        assert api.get("/v1/jobs", headers=bearer(token)).status_code == 200


def test_insecure_keeps_open_mode_on_a_network_bind(settings):
    wide = settings.model_copy(update={"host": "0.0.0.0", "insecure": True})
    with serving(wide, schedule=False) as api:
        assert api.get("/v1/jobs", headers={"Host": "gpu-box.lab:8000"}).status_code == 200


def test_a_real_gpuq_serve_on_0000_refuses_tcp_once_its_last_user_is_revoked_but_not_the_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    home = tmp_path / "gpuq"
    server = Server(home)
    server.env["GPUQ_HOST"] = "0.0.0.0"
    token = server.cli("users", "add", "ana", "--admin").splitlines()[-1]
    server.start()  # a user exists: it starts on 0.0.0.0 without --insecure
    try:
        assert httpx.get(f"{server.url}/v1/jobs", headers=bearer(token)).status_code == 200
        revoked = subprocess.run(
            [*GPUQ, "users", "revoke", "ana"], env=server.env, capture_output=True, text=True
        )
        assert revoked.returncode == 0 and "gpuq: no user left" in revoked.stderr
        refused = httpx.get(f"{server.url}/v1/jobs")
        assert refused.status_code == 403, refused.text
        assert FIRST_USER in refused.json()["detail"]
        # The local socket is this machine by the kernel's word: local login still works,
        # through gpuq's own client (`Host: gpuq.socket`) as through `curl --unix-socket`.
        monkeypatch.delenv("GPUQ_URL", raising=False)
        monkeypatch.setenv("GPUQ_SOCKET", str(home / "gpuq.sock"))
        with Client() as local:
            assert local.url.startswith("unix:")
            assert local.json("GET", "/v1/jobs")["jobs"] == []
        socket = httpx.HTTPTransport(uds=str(home / "gpuq.sock"))
        with httpx.Client(transport=socket, base_url="http://localhost") as curl:
            assert curl.get("/v1/gpus").status_code == 200
    finally:
        server.kill()


THIS_MACHINE = ["localhost", "localhost:8000", "LOCALHOST:8000", "127.0.0.1", "127.0.0.1:8000"]
THIS_MACHINE += ["127.1.2.3:80", "[::1]", "[::1]:8000"]
OTHERS = ["evil.example", "evil.example:8000", "127.0.0.1.evil.example", "localhost.evil.example"]
OTHERS += ["10.0.0.1:8000", "[::2]:8000", "[::1]x", "[::1", "localhost:http", "::1", ""]
OTHERS += ["localhost:¹", "[::1]:²"]  # digits to str.isdigit(), not to int()


@pytest.mark.parametrize("host", THIS_MACHINE)
def test_loopback_names_and_addresses_are_this_machine(host):
    assert names_this_machine(host)


@pytest.mark.parametrize("host", OTHERS)
def test_other_names_are_not(host):
    assert not names_this_machine(host)


def test_a_loopback_gpuq_with_no_user_answers_only_its_own_names(api):
    refused = api.get("/v1/jobs", headers={"Host": "evil.example"})
    assert refused.status_code == 421, refused.text
    assert "Host 'evil.example' is not served" in refused.json()["detail"]
    submitted = api.post("/v1/jobs", json=job_spec(), headers={"Host": "evil.example:80"})
    assert submitted.status_code == 421
    for host in ("localhost:8000", "127.0.0.1:8000", "[::1]:8000", "127.0.0.1"):
        assert api.get("/v1/jobs", headers={"Host": host}).status_code == 200, host


def test_no_other_sites_page_and_no_proxy_acts_in_open_mode(api):
    job_id = api.post("/v1/jobs", json=job_spec()).json()["id"]
    # A cross-site form can POST here without any preflight: its Origin gives it away.
    cancel = f"/v1/jobs/{job_id}/cancel"
    refused = api.post(cancel, headers={"Origin": "https://evil.example"})
    assert refused.status_code == 403 and "https://evil.example" in refused.json()["detail"]
    assert api.post(cancel, headers={"Origin": "null"}).status_code == 403
    # A reverse proxy on this machine relays requests from elsewhere.
    for header in ({"X-Forwarded-For": "203.0.113.9"}, {"Forwarded": "for=203.0.113.9"}):
        proxied = api.get("/v1/jobs", headers=header)
        assert proxied.status_code == 403 and "through a proxy" in proxied.json()["detail"]
    # The dashboard's own page, on this machine, may.
    assert api.post(cancel, headers={"Origin": "http://127.0.0.1:8000"}).status_code == 202


def test_with_users_any_host_is_served(api):
    # A token is what counts then; a loopback gpuq behind a reverse proxy keeps its name.
    token = users.add_user(api.app.state.service.db, "ana")
    headers = {**bearer(token), "Host": "gpuq.lab.example", "X-Forwarded-For": "203.0.113.9"}
    assert api.get("/v1/jobs", headers=headers).status_code == 200


def over_socket(app: Any, uid: int) -> Any:
    """`app` as `PeerCredentialsProtocol` hands it a Unix connection from `uid`."""

    async def with_peer(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope[PEER_UID] = uid
        await app(scope, receive, send)

    return with_peer


@contextmanager
def on_socket(settings: Settings, uid: int) -> Iterator[TestClient]:
    """A client of the API as the account `uid` reaches it on the local socket."""
    service = open_api(settings)
    app = over_socket(create_app(settings, service), uid)
    try:
        # Not `local_client`: on the socket, any name and no address at all will do.
        with TestClient(app, base_url="http://gpuq.socket", client=("", 0)) as client:
            yield client
    finally:
        service.close()


@pytest.fixture
def socket_client(settings: Settings) -> Iterator[TestClient]:
    with on_socket(settings, os.getuid()) as client:
        yield client


def test_on_the_local_socket_any_host_is_served_with_no_user(socket_client):
    assert socket_client.get("/v1/jobs").status_code == 200  # as gpuq's own client sends it
    assert socket_client.get("/v1/jobs", headers={"Host": "localhost"}).status_code == 200
    # With a token header but no user, the caller is open mode's, still over the socket.
    assert socket_client.get("/v1/jobs", headers=bearer("gpuq_stale")).status_code == 200


@pytest.mark.skipif(os.geteuid() != 0, reason="the rule is root's")
def test_as_root_with_no_user_the_socket_serves_root_alone(settings, db):
    """Issue 47, F: with no user every caller is an admin; under root, on a socket every
    account may connect to, that would be every account on the box."""
    nobody = pwd.getpwnam("nobody")
    with on_socket(settings, nobody.pw_uid) as socket_client:
        for headers in ({}, bearer("gpuq_stale")):  # with a token or not: open mode's caller
            for method, path in (("GET", "/v1/jobs"), ("POST", "/v1/jobs"), ("GET", "/v1/gpus")):
                refused = socket_client.request(method, path, json=job_spec(), headers=headers)
                assert refused.status_code == 403, (method, path, refused.text)
                detail = refused.json()["detail"]
                assert "it serves root alone, on its local socket" in detail, detail
                assert FIRST_USER in detail and "--unix-user nobody" in detail, detail
        # With users, the socket knows an account by the user bound to it, as ever.
        users.add_user(db, "admin", admin=True)
        users.add_user(db, "nob", unix_user=nobody.pw_name)
        assert socket_client.get("/v1/jobs").status_code == 200
