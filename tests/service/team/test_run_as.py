"""A job starts only under the run-as rules in force when it starts, not only those it was
submitted under: a job may wait for days (`not_before`, a busy queue), and meanwhile users
are added, or gpuq restarts with other settings. (The suite runs as root; the owner's
binding, which needs real accounts, is re-checked in tests/e2e/test_run_as.py.)"""

import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from service.team import users
from tests.conftest import serving, wait_for
from tests.service.team.test_shared_account import add_users

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="gpuq's own account is root's here")


def leaves(mark: Path, seconds: float) -> dict[str, Any]:
    """A command job, waiting `seconds`, that leaves `mark` if it ever runs."""
    later = (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()
    code = f"open({str(mark)!r}, 'w').close()"
    argv = [sys.executable, "-c", code]
    return {"name": "mark", "kind": "command", "command": {"argv": argv}, "not_before": later}


def refused_at_start(client: Any, job_id: int) -> str:
    job = wait_for(client, job_id, lambda j: j["status"] not in ("queued", "starting"))
    assert (job["status"], job["reason"]) == ("failed", "launch_error"), job
    assert job["message"].startswith("not started: ") and "submit it again" in job["message"]
    return str(job["message"])


def test_a_job_queued_in_open_mode_does_not_start_on_an_account_users_now_share(settings):
    """Issue 47, F: queued in open mode as gpuq's own account, then users were added."""
    shared = settings.model_copy(update={"allow_shared_account": False})
    marks = [shared.home / "open-mode-ran", shared.home / "anas-ran"]
    with serving(shared) as client:
        queued = client.post("/v1/jobs", json=leaves(marks[0], 2))
        assert queued.status_code == 201, queued.text
        token = add_users(shared, "ana")["ana"]  # one user: she alone may submit
        client.headers["Authorization"] = f"Bearer {token}"
        said = refused_at_start(client, queued.json()["id"])
        assert "its owner anonymous is no gpuq user now" in said
        assert "GPUQ_RUN_AS=owner" in said and "GPUQ_ALLOW_SHARED_ACCOUNT=1" in said

        hers = client.post("/v1/jobs", json=leaves(marks[1], 2))
        assert hers.status_code == 201, hers.text
        add_users(shared, "bo")  # a second user: no one's job runs as gpuq's account now
        said = refused_at_start(client, hers.json()["id"])
        assert "2 users share gpuq's own account (root, GPUQ_RUN_AS=service)" in said
    assert not any(mark.exists() for mark in marks)


def test_a_command_job_does_not_start_as_root_once_root_jobs_are_no_longer_allowed(settings):
    mark = settings.home / "ran-as-root"
    with serving(settings, schedule=False) as client:  # GPUQ_ALLOW_ROOT_JOBS=1
        job_id = client.post("/v1/jobs", json=leaves(mark, 0)).json()["id"]
    # gpuq restarts without GPUQ_ALLOW_ROOT_JOBS=1: what it queued must not start as root.
    with serving(settings.model_copy(update={"allow_root_jobs": False})) as client:
        said = refused_at_start(client, job_id)
    assert "command jobs and sessions would run as root here" in said
    assert "GPUQ_ALLOW_ROOT_JOBS=1" in said and not mark.exists()


def test_the_admins_word_still_lets_a_queued_job_start_on_the_shared_account(settings):
    """GPUQ_ALLOW_SHARED_ACCOUNT=1 (the suite's settings): the rule, not users alone, refuses."""
    mark = settings.home / "ran"
    with serving(settings) as client:
        queued = client.post("/v1/jobs", json=leaves(mark, 1))
        token = users.add_user(client.app.state.service.db, "ana")
        client.headers["Authorization"] = f"Bearer {token}"
        job = wait_for(client, queued.json()["id"], lambda j: j["status"] == "succeeded")
    assert job["owner"] == "anonymous" and mark.exists()
