"""A member's job against gpuq itself, as a real account, with gpuq as root leading a
session with no terminal (as under systemd): issue 47's attacks, end to end.

A. A job turns its own files into a terminal of its own (a link to a pseudo-terminal's
   slave over `output.log`, `events.jsonl`, an artifact), its owner asks for them, then
   the job closes the master: had gpuq opened the slave, that terminal would be gpuq's and
   the hang-up would end it. gpuq must keep answering, scheduling and starting jobs.
B. gpuq is killed between a job's launch and its record of the runner's pid; meanwhile
   the job writes into `runner.json` the id of a process group of root's whose leader has
   ended. Started again, gpuq must signal none of root's processes, and find the job's
   real runner by what it knows.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.scheduler.starting import CRASH_AFTER_LAUNCH
from service.store.db import Database
from service.store.migrate import upgrade
from service.team import users
from tests.accounts import ANA, Accounts, throwaway_accounts
from tests.e2e.server import Server
from tests.processes import gone

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
def served(
    accounts: Accounts, request: pytest.FixtureRequest
) -> Iterator[tuple[Server, dict[str, str]]]:
    home = accounts.scratch / request.node.name[:24]
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


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def command(code: str) -> dict:
    return {"kind": "command", "command": {"argv": [sys.executable, "-c", code]}}


def test_a_job_cannot_hang_gpuq_up_through_its_own_files(served, accounts):
    server, tokens = served
    server.start(new_session=True)
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


#: The job: once its runner has written `runner.json`, it names root's group there instead.
FORGES_ITS_RUNNER = r"""
import json, os, time
run = os.path.dirname(os.environ["GPUQ_ARTIFACTS_DIR"])
home = os.environ["HOME"]
record = os.path.join(run, "runner.json")
while True:
    try:
        if json.load(open(record)).get("runner_pid"):
            break
    except (OSError, ValueError):
        pass
    time.sleep(0.02)
victim = int(os.environ["VICTIM"])
with open(record + ".swap", "w") as f:
    json.dump({"runner_pid": victim, "train_pid": victim}, f)
os.rename(record + ".swap", record)
open(os.path.join(home, "forged"), "w").close()
while not os.path.exists(os.path.join(home, "release")):
    time.sleep(0.05)
print("done")
"""


def test_a_pid_a_job_wrote_is_never_signalled_after_a_crash_before_the_record(served, accounts):
    server, tokens = served
    # Root's: a group whose leader has ended, its `sleep` still in it (`killpg` reaches it).
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 300 >/dev/null & echo $!"],
        start_new_session=True,
        stdout=subprocess.PIPE,
    )
    assert leader.stdout is not None
    roots_sleep = int(leader.stdout.readline())
    leader.wait()
    try:
        server.env[CRASH_AFTER_LAUNCH] = "1"
        server.start()
        ana_home = Path(accounts.ana.pw_dir)
        spec = command(FORGES_ITS_RUNNER)
        spec["command"]["env"] = {"VICTIM": str(leader.pid)}
        spec["resources"] = {"gpus": 0}
        submitted = httpx.post(f"{server.url}/v1/jobs", json=spec, headers=bearer(tokens["ana"]))
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]
        assert server.proc is not None
        assert server.proc.wait(timeout=30) == -signal.SIGKILL  # launched, not recorded
        deadline = time.monotonic() + 60
        while not (ana_home / "forged").exists():
            assert time.monotonic() < deadline, "the job never forged its runner.json"
            time.sleep(0.05)

        del server.env[CRASH_AFTER_LAUNCH]
        server.start()
        time.sleep(2)  # a few scheduler steps over the job gpuq took back
        assert not gone(roots_sleep), "root's process was killed"
        assert server.job(job_id)["status"] == "running"
        (ana_home / "release").touch()
        job = server.wait(job_id, {"succeeded", "failed"})
        assert (job["status"], job["attempt"]) == ("succeeded", 1), job
        log = httpx.get(f"{server.url}/v1/jobs/{job_id}/logs", headers=bearer(tokens["ana"]))
        assert log.text == "done\n"
        assert not gone(roots_sleep)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(roots_sleep, signal.SIGKILL)
