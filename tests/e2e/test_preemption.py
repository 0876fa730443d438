"""Preemption on simulated GPUs, with real jobs: an urgent job takes the GPU of the
cheapest preemptible low-priority job, which saves on SIGTERM and resumes afterwards with
every epoch once; what may not be preempted (GPUQ_PREEMPT off, a command job that did not
say `preemptible`, a job younger than GPUQ_PREEMPT_MIN_RUN_S, one preempted
GPUQ_PREEMPT_MAX_TIMES already) is not."""

import json
import os
import re
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from service.settings import Settings
from tests.conftest import command_spec, ended, job_spec, serving, wait_for

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).parents[2] / "examples" / "preemptible.py"
#: how long before a choice an epoch's end may have gone unseen by it (generous)
UNSEEN_S = 2.0
KERAS = {"epochs": 8, "data": {"source": "synthetic", "samples": 4096, "features": 8}}


def preempting(settings: Settings, **changes: Any) -> Settings:
    update = {"preempt": "priority", "preempt_min_run_s": 0.0, **changes}
    return settings.model_copy(update=update)


def submit(client, spec: dict[str, Any]) -> int:
    response = client.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def dry_run(client, spec: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/jobs", json=spec, params={"dry_run": "true"})
    assert response.status_code == 200, response.text
    return response.json()


def resumable(epochs: int = 1000, epoch_s: float = 0.5, **spec: Any) -> dict[str, Any]:
    """examples/preemptible.py as a command job (low priority, preemptible unless told)."""
    argv = [sys.executable, str(EXAMPLE), "--epochs", str(epochs), "--epoch-s", str(epoch_s)]
    job = command_spec("")
    job["command"]["argv"] = argv
    return {**job, "name": "resumable", "priority": -1, "preemptible": True, **spec}


def urgent(seconds: float = 1.0, **resources: Any) -> dict[str, Any]:
    return command_spec(f"import time; time.sleep({seconds})", **(resources or {"gpus": 1}))


def running(job: dict[str, Any]) -> bool:
    return job["status"] == "running"


def reported(epochs: int):
    """A builtin job's progress has reached `epochs`."""
    return lambda job: (job["progress"].get("epoch") or 0) >= epochs


def wait_epochs(client, job_id: int, epochs: int, timeout_s: float = 60) -> None:
    """Until the job's metrics hold `epochs` epochs (a command job's `report`s)."""
    deadline = time.monotonic() + timeout_s
    while len(client.get(f"/v1/jobs/{job_id}/metrics").json()["epochs"]) < epochs:
        assert time.monotonic() < deadline, f"job {job_id} reported fewer than {epochs} epochs"
        time.sleep(0.1)


def test_an_urgent_job_takes_a_gpu_and_the_victim_resumes_with_every_epoch_once(settings):
    with serving(preempting(settings)) as client:
        low = [submit(client, job_spec(keras=KERAS, priority=-1)) for _ in range(2)]
        for job_id in low:
            wait_for(client, job_id, reported(2), timeout_s=120)

        preview = dry_run(client, urgent())
        assert not preview["would_start"]
        assert [v["job_id"] in low for v in preview["would_preempt"]] == [True]
        assert preview["wait_reason"].startswith(
            f"would preempt job {preview['would_preempt'][0]['job_id']} ("
        )

        job_id = submit(client, urgent())
        wait_for(client, job_id, lambda j: j["status"] != "queued", timeout_s=60)
        preempted = [
            j for j in (client.get(f"/v1/jobs/{i}").json() for i in low) if j["preemptions"]
        ]
        assert [j["preempted_by"] for j in preempted] == [job_id], "exactly one victim"
        victim = preempted[0]
        other = next(i for i in low if i != victim["id"])
        assert client.get(f"/v1/jobs/{other}").json()["attempt"] == 1, "the other ran on"

        done = wait_for(client, victim["id"], ended, timeout_s=240)
        assert done["status"] == "succeeded", done["log_tail"]
        assert (done["attempt"], done["preemptions"], done["preempted_by"]) == (2, 1, job_id)
        first = done["previous_attempts"][0]
        assert (first["reason"], first["preempted_by"]) == ("preempted", job_id)
        # It saved on SIGTERM and exited (75), well inside the grace period: not SIGKILLed.
        assert first["exit_code"] == 75
        assert first["message"].startswith(f"preempted by job {job_id}, which needed its GPUs")
        assert 0 <= first["lost_s"] < 60
        history = client.get(f"/v1/jobs/{victim['id']}/metrics").json()["epochs"]
        assert [e["epoch"] for e in history] == list(range(1, 9)), "each epoch exactly once"
        # At most the epoch it was in is lost: it resumes right after the last one it finished.
        done_before = max(e["epoch"] for e in events(settings, victim["id"], 1, "epoch"))
        assert [e["epoch"] for e in events(settings, victim["id"], 2, "resumed")] == [
            done_before + 1
        ]
        audit = client.get("/v1/audit").json()["entries"]
        mine = [
            e for e in audit if (e["action"], e["target"]) == ("preempt", f"job/{victim['id']}")
        ]
        assert [e["detail"]["for_job"] for e in mine] == [job_id]
        # The cheaper of the two: less work since its last epoch when it was chosen. gpuq
        # sees an epoch once it reads the event, so an epoch that ended in the moments before
        # the choice may not have counted: each job's loss lies between the time since its
        # last epoch and the time since its last epoch a few seconds earlier.
        chosen_at = datetime.fromisoformat(mine[0]["at"]).timestamp()

        def loss_range(job: int) -> tuple[float, float]:
            ends = [e["ts"] for e in events(settings, job, 1, "epoch")]
            began = events(settings, job, 1, "started")[0]["ts"]
            seen = max(t for t in ends if t <= chosen_at)
            surely = max((t for t in ends if t <= chosen_at - UNSEEN_S), default=began)
            return chosen_at - seen, chosen_at - surely

        fewest, most = loss_range(victim["id"])
        assert fewest <= loss_range(other)[1] + 0.5
        assert fewest - 0.5 <= mine[0]["detail"]["loses_s"] <= most + 0.5
        assert wait_for(client, other, ended, timeout_s=240)["status"] == "succeeded"


def events(settings: Settings, job_id: int, attempt: int, kind: str) -> list[dict[str, Any]]:
    path = preempting(settings).runs_dir / str(job_id) / str(attempt) / "events.jsonl"
    found = [json.loads(line) for line in path.read_text().splitlines()]
    return [e for e in found if e["event"] == kind]


def test_a_preemptible_command_job_saves_on_sigterm_and_resumes_but_only_max_times(settings):
    one_gpu = preempting(settings, gpus="sim:1x8GiB", preempt_max_times=1)
    with serving(one_gpu) as client:
        victim = submit(client, resumable(max_retries=1))
        wait_epochs(client, victim, 2)
        first = submit(client, urgent(1.0))
        wait_for(client, first, ended, timeout_s=60)
        # Back on its GPU, it resumed from what it saved on SIGTERM.
        job = wait_for(client, victim, lambda j: running(j) and j["attempt"] == 2, timeout_s=60)
        assert job["previous_attempts"][0]["reason"] == "preempted"
        wait_epochs(
            client, victim, len(client.get(f"/v1/jobs/{victim}/metrics").json()["epochs"]) + 1
        )
        saved = re.search(r"resumed after epoch (\d+)", client.get(f"/v1/jobs/{victim}/logs").text)
        assert saved is not None and int(saved[1]) >= 2
        assert f"SIGTERM: saved after epoch {saved[1]}; exiting to be resumed" in job["log_tail"]

        # Preempted GPUQ_PREEMPT_MAX_TIMES (1) times already: the next urgent job waits.
        second = submit(client, urgent(1.0))
        waiting = wait_for(client, second, lambda j: j["wait_reason"] is not None)
        time.sleep(2)
        assert client.get(f"/v1/jobs/{second}").json()["status"] == "queued"
        assert "preempt" not in waiting["wait_reason"]
        assert client.get(f"/v1/jobs/{victim}").json()["attempt"] == 2
        assert not dry_run(client, urgent())["would_preempt"]

        # The preemption was no failure: its one retry is still there for a real one.
        client.post(f"/v1/jobs/{second}/cancel")
        runner = one_gpu.runs_dir / str(victim) / "2" / "runner.json"
        os.kill(json.loads(runner.read_text())["train_pid"], signal.SIGKILL)
        job = wait_for(client, victim, lambda j: j["attempt"] == 3 or ended(j), timeout_s=60)
        assert [a["reason"] for a in job["previous_attempts"]] == ["preempted", "signal"]
        client.post(f"/v1/jobs/{victim}/cancel")


def test_a_command_job_that_did_not_say_preemptible_is_never_chosen(settings):
    with serving(preempting(settings)) as client:
        # Job 1 is the cheapest by every measure (it reports no epoch, it started last), but
        # its program never promised to save on SIGTERM.
        kept = submit(client, resumable(preemptible=None))
        wait_for(client, kept, running)
        taken = submit(client, resumable())
        wait_epochs(client, taken, 1)
        assert [v["job_id"] for v in dry_run(client, urgent())["would_preempt"]] == [taken]
        # Two GPUs would need both: the one that may not be preempted keeps the job waiting.
        two = dry_run(client, urgent(gpus=2))
        assert (two["would_start"], two["would_preempt"]) == (False, [])
        assert client.get(f"/v1/jobs/{kept}").json()["spec"]["preemptible"] is None
        for job_id in (kept, taken):
            client.post(f"/v1/jobs/{job_id}/cancel")


@pytest.mark.parametrize(
    "changes",
    [{"preempt": "off"}, {"preempt_min_run_s": 3600.0}],
    ids=["GPUQ_PREEMPT=off", "GPUQ_PREEMPT_MIN_RUN_S"],
)
def test_nothing_is_preempted_when_the_site_says_so(settings, changes):
    with serving(preempting(settings, gpus="sim:1x8GiB", **changes)) as client:
        victim = submit(client, resumable())
        wait_epochs(client, victim, 1)
        assert dry_run(client, urgent())["would_preempt"] == []
        job_id = submit(client, urgent())
        waiting = wait_for(client, job_id, lambda j: j["wait_reason"] is not None)
        assert waiting["wait_reason"].startswith("waiting for 1 GPU whole; GPU 0 is held whole")
        time.sleep(2)
        assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "queued"
        job = client.get(f"/v1/jobs/{victim}").json()
        assert (job["status"], job["attempt"], job["preemptions"]) == ("running", 1, 0)
        for either in (victim, job_id):
            client.post(f"/v1/jobs/{either}/cancel")
