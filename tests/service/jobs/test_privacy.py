"""What members see of each other's jobs (`service.jobs.privacy`): under GPUQ_RUN_AS=owner
another member reads a job's state and placement, never its log lines, its own words in
`message`, its `command.env` or its `idle_exempt` reason; its owner and admins read all.

The jobs here end through the scheduler's own writes (`writes.finish`, `writes.requeue`);
tests/e2e/test_run_as.py has a real job, run as its owner, read through the event stream.
"""

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuq.contract.outcome import Outcome
from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus, Reason
from service import jobs
from service.jobs import writes
from service.jobs.privacy import MEANING, OWN_WORDS, public_message
from service.settings import Settings
from service.store.db import Database
from service.team import users
from service.team.users import Caller
from tests.conftest import serving

SECRET = "s3cr3t"
OOM_LINE = f"CUDA out of memory. Tried to allocate 2 GiB ({SECRET}-log)"
SPEC = {
    "name": "private",
    "kind": "command",
    "command": {"argv": [sys.executable, "-c", "pass"], "env": {"API_KEY": f"{SECRET}-env"}},
    "resources": {"gpus": 1},
    "idle_exempt": f"notebook for {SECRET}-exempt",
    "webhook": f"https://hooks.example/{SECRET}-hook",
}
FAILED = Outcome(
    JobStatus.failed,
    Reason.gpu_oom,
    f"ran out of GPU memory ({OOM_LINE}): lower batch_size or raise memory_mb",
    1,
)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def owner_mode(settings: Settings) -> Settings:
    return settings.model_copy(update={"run_as": "owner", "allow_root_jobs": False})


@pytest.fixture
def team(settings: Settings) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The API under GPUQ_RUN_AS=owner (the suite runs as root), with ana, bo and an admin."""
    with serving(owner_mode(settings), schedule=False) as api:
        db = api.app.state.service.db
        names = {"ana": False, "bo": False, "root": True}
        yield api, {name: users.add_user(db, name, admin=admin) for name, admin in names.items()}


def failed_job(db: Database, outcome: Outcome = FAILED) -> int:
    """Ana's job, ended as the scheduler ends one, with its log's last lines."""
    job, _ = jobs.create_job(db, spec=JobSpec.model_validate(SPEC), caller=Caller("ana", False))
    assert job.id is not None
    with db.write() as session:
        assert writes.transition(session, job.id, JobStatus.starting, assigned_gpus=[1])
        writes.finish(session, job.id, outcome, ["Traceback (most recent call last):", OOM_LINE])
    return job.id


def test_another_member_sees_a_jobs_state_but_not_what_its_run_said(team):
    api, tokens = team
    job_id = failed_job(api.app.state.service.db)
    url = f"/v1/jobs/{job_id}"
    reads = {
        "get": lambda t: api.get(url, headers=bearer(t)).json(),
        "long poll": lambda t: api.get(url, params={"wait_s": 1}, headers=bearer(t)).json(),
        "list": lambda t: api.get("/v1/jobs", headers=bearer(t)).json()["jobs"][0],
        "patch {}": lambda t: api.patch(url, json={}, headers=bearer(t)).json(),
    }
    for how, read in reads.items():
        job = read(tokens["bo"])
        assert SECRET not in str(job), (how, job)
        assert (job["status"], job["reason"], job["exit_code"]) == ("failed", "gpu_oom", 1)
        assert job["assigned_gpus"] == [1] and job["spec"]["resources"]["gpus"] == 1
        assert job["message"] == "ran out of GPU memory"
        assert job["log_tail"] == [] and job["spec"]["command"]["env"] == {}
        assert job["spec"]["idle_exempt"] is None and job["spec"]["webhook"] is None
        assert job["hidden"] == [
            "message",
            "log_tail",
            "spec.command.env",
            "spec.idle_exempt",
            "spec.webhook",
        ]
        for who in ("ana", "root"):
            whole = read(tokens[who])
            assert whole["hidden"] == [], (how, who)
            assert whole["log_tail"][-1] == OOM_LINE and OOM_LINE in whole["message"]
            assert whole["spec"]["command"]["env"] == {"API_KEY": f"{SECRET}-env"}
            assert whole["spec"]["idle_exempt"] == f"notebook for {SECRET}-exempt"


def test_a_retry_shows_others_why_the_attempt_failed_but_not_its_words(team):
    api, tokens = team
    db = api.app.state.service.db
    job, _ = jobs.create_job(db, spec=JobSpec.model_validate(SPEC), caller=Caller("ana", False))
    assert job.id is not None
    with db.write() as session:
        assert writes.transition(session, job.id, JobStatus.starting, attempt=1)
        said = Outcome(JobStatus.failed, Reason.nonzero_exit, f"KeyError: '{SECRET}'", 1)
        args = {"attempt": 1, "last_epoch": None, "previous_attempts": []}
        assert writes.requeue(session, job.id, said, [f"{SECRET} in the log"], 60, **args)
    seen = api.get(f"/v1/jobs/{job.id}", headers=bearer(tokens["bo"])).json()
    assert SECRET not in str(seen), seen
    assert seen["wait_reason"] == "retrying in 60 s: attempt 1 failed (nonzero_exit)"
    assert seen["previous_attempts"][0]["message"] == "exited with a non-zero code"
    assert {"wait_reason", "previous_attempts.message", "log_tail"} <= set(seen["hidden"])
    whole = api.get(f"/v1/jobs/{job.id}", headers=bearer(tokens["ana"])).json()
    assert f"KeyError: '{SECRET}'" in whole["wait_reason"]
    assert whole["previous_attempts"][0]["message"] == f"KeyError: '{SECRET}'"


def test_under_run_as_service_members_see_all_but_the_webhook(settings):
    # Every job runs as gpuq's one account then: any member's job can read the others' files.
    with serving(settings, schedule=False) as api:
        db = api.app.state.service.db
        bo = users.add_user(db, "bo")
        job = api.get(f"/v1/jobs/{failed_job(db)}", headers=bearer(bo)).json()
    assert job["hidden"] == ["spec.webhook"]
    assert job["log_tail"][-1] == OOM_LINE and OOM_LINE in job["message"]
    assert job["spec"]["command"]["env"] == {"API_KEY": f"{SECRET}-env"}


def test_gpuqs_own_words_stay_and_every_reason_is_placed():
    assert OWN_WORDS.isdisjoint(MEANING) and OWN_WORDS | MEANING.keys() == set(Reason)
    said = "stopped after reaching its time limit of 60 s"
    assert public_message(Reason.time_limit, said) == said
    assert (
        public_message(Reason.nonzero_exit, f"ValueError: {SECRET}") == MEANING[Reason.nonzero_exit]
    )
    crashed = (
        f"the program crashed (SIGSEGV) in main ({SECRET}/train.py:3); the stack is in the log"
    )
    assert public_message(Reason.signal, crashed) == MEANING[Reason.signal]
    # Before a job has ended, its message is its own last words.
    assert public_message(None, f"failed: {SECRET}") is None
    assert public_message(None, None) is None


def test_the_cli_names_what_it_does_not_show(team, capsys):
    from gpuq.http import Client
    from service.cli.main import main

    api, tokens = team
    job_id = failed_job(api.app.state.service.db)
    api.headers.update(bearer(tokens["bo"]))
    assert main(["show", str(job_id)], api=Client(http=api)) == 0
    shown: Any = capsys.readouterr().out
    assert SECRET not in shown
    assert "reason: gpu_oom: ran out of GPU memory" in shown
    assert "hidden from you (ana's and admins'): message, log_tail, spec.command.env" in shown
