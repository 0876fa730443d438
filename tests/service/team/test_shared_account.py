"""GPUQ_RUN_AS=service with several users: their jobs would share gpuq's own account, so
gpuq refuses unless an admin says GPUQ_ALLOW_SHARED_ACCOUNT=1. (The suite runs as root with
GPUQ_ALLOW_ROOT_JOBS=1, where members' command jobs run as gpuq's account.)"""

import subprocess

import pytest

from service.runtime import open_api
from service.store.db import Database
from service.store.migrate import upgrade
from service.team import users
from service.team.run_as import RunAsError
from tests.conftest import serving
from tests.e2e.server import GPUQ, Server

SPEC = {"name": "hi", "kind": "command", "command": {"argv": ["true"]}}


@pytest.fixture
def shared(settings):
    """The suite's settings, without the admin's word that sharing is fine."""
    return settings.model_copy(update={"allow_shared_account": False})


def add_users(settings, *names: str) -> dict[str, str]:
    settings.home.mkdir(parents=True, exist_ok=True)
    db = Database.open(settings.db_url)
    upgrade(db)
    tokens = {name: users.add_user(db, name, admin=name == "admin") for name in names}
    db.dispose()
    return tokens


def test_gpuq_serve_refuses_to_start_with_two_users_on_its_own_account(tmp_path):
    server = Server(tmp_path / "gpuq")
    server.home.mkdir()
    del server.env["GPUQ_ALLOW_SHARED_ACCOUNT"]
    for name in ("ana", "bo"):
        server.cli("users", "add", name)
    started = subprocess.run(
        [*GPUQ, "serve"], env=server.env, capture_output=True, text=True, timeout=60
    )
    assert started.returncode != 0
    assert "2 users share gpuq's own account" in started.stderr
    assert "GPUQ_RUN_AS=owner" in started.stderr
    assert "GPUQ_ALLOW_SHARED_ACCOUNT=1" in started.stderr


def test_one_user_or_the_admins_word_lets_it_start(shared):
    add_users(shared, "ana")
    open_api(shared).close()
    add_users(shared, "bo")
    with pytest.raises(RunAsError, match="2 users share gpuq's own account"):
        open_api(shared)
    open_api(shared.model_copy(update={"allow_shared_account": True})).close()


def test_a_user_added_while_it_runs_stops_new_jobs_until_an_admin_decides(shared):
    tokens = add_users(shared, "admin")
    with serving(shared) as client:
        client.headers["Authorization"] = f"Bearer {tokens['admin']}"
        assert client.post("/v1/jobs", json=SPEC).status_code == 201
        add_users(shared, "bo")
        refused = client.post("/v1/jobs", json=SPEC)
    assert refused.status_code == 403
    assert "no job can run here: 2 users share gpuq's own account" in refused.text
