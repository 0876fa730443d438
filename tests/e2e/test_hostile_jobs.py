"""A member's job against gpuq itself, as a real account, with gpuq as root leading a
session with no terminal (as under systemd): issue 47's attacks, end to end.

A. A job turns its own files into a terminal of its own (a link to a pseudo-terminal's
   slave over `output.log`, `events.jsonl`, an artifact), its owner asks for them, then
   the job closes the master: had gpuq opened the slave, that terminal would be gpuq's and
   the hang-up would end it. gpuq must keep answering, scheduling and starting jobs.
"""

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.store.db import Database
from service.store.migrate import upgrade
from service.team import users
from tests.accounts import ANA, Accounts, throwaway_accounts
from tests.e2e.server import Server

#: The job: a terminal of its own behind its files' names; it lets go when told (`go`).
HANG_UP = r"""
import os, pty, sys, time
run = os.path.dirname(os.environ["GPUQ_ARTIFACTS_DIR"])
home = os.environ["HOME"]
master, slave = pty.openpty()
target = "/dev/./././" + os.ttyname(slave).removeprefix("/dev/")
os.close(slave)
for name in ("output.log", "events.jsonl", "artifacts/model.keras"):
    os.symlink(target, os.path.join(run, ".swap"))
    os.rename(os.path.join(run, ".swap"), os.path.join(run, name))
open(os.path.join(home, "ready"), "w").close()
while not os.path.exists(os.path.join(home, "go")):
    time.sleep(0.05)
os.close(master)  # a hang-up for whichever session made it its terminal
time.sleep(1)
open(os.path.join(home, "closed"), "w").close()
"""


@pytest.fixture(scope="module")
def accounts() -> Iterator[Accounts]:
    with throwaway_accounts() as made:
        yield made


@pytest.fixture
def served(accounts: Accounts) -> Iterator[tuple[Server, dict[str, str]]]:
    home = accounts.scratch / "hostile"
    home.mkdir()
    db = Database.open(f"sqlite:///{home / 'gpuq.db'}")
    upgrade(db)
    tokens = {
        "admin": users.add_user(db, "admin", admin=True),
        "ana": users.add_user(db, "ana", unix_user=ANA),
    }
    db.dispose()
    server = Server(home)
    server.env.update(GPUQ_RUN_AS="owner", GPUQ_TOKEN=tokens["admin"])
    server.env.pop("GPUQ_ALLOW_ROOT_JOBS")
    server.start(new_session=True)
    try:
        yield server, tokens
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()


def wait_for_file(path: Path, server: Server, job_id: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"never appeared: {path}; {server.job(job_id)}"
        time.sleep(0.05)


def command(code: str) -> dict:
    return {"kind": "command", "command": {"argv": [sys.executable, "-c", code]}}


def test_a_job_cannot_hang_gpuq_up_through_its_own_files(served, accounts):
    server, tokens = served
    ana_home = Path(accounts.ana.pw_dir)
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {tokens['ana']}"}
    ) as ana:
        submitted = ana.post("/v1/jobs", json={**command(HANG_UP), "resources": {"gpus": 0}})
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]
        wait_for_file(ana_home / "ready", server, job_id)
        # The owner asks for everything gpuq reads in the folder; the scheduler reads the
        # events of its own accord.
        for path in ("logs", "logs?tail=5", "logs?offset=3", "artifacts"):
            answer = ana.get(f"/v1/jobs/{job_id}/{path}")
            assert answer.status_code == 200, (path, answer.text)
        assert "model.keras" not in ana.get(f"/v1/jobs/{job_id}/artifacts").text
        assert ana.get(f"/v1/jobs/{job_id}/artifacts/model.keras").status_code == 404
        time.sleep(1)  # a scheduler tick or more over the events
        (ana_home / "go").touch()
        wait_for_file(ana_home / "closed", server, job_id)
        time.sleep(0.5)

        assert server.proc is not None and server.proc.poll() is None, "gpuq serve was hung up"
        job = server.wait(job_id, {"succeeded", "failed"})
        assert job["status"] == "succeeded", job
        # Still scheduling and starting jobs.
        after = ana.post("/v1/jobs", json={**command("print('after')"), "resources": {"gpus": 0}})
        assert after.status_code == 201, after.text
        assert server.wait(after.json()["id"], {"succeeded", "failed"})["status"] == "succeeded"
        assert ana.get(f"/v1/jobs/{after.json()['id']}/logs").text == "after\n"
    assert os.getsid(server.proc.pid) == server.proc.pid  # it led its session all along
