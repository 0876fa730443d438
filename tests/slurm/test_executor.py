"""gpuq's API on a real one-node Slurm cluster (`GPUQ_EXECUTOR=slurm`): `gpuq serve` as a
real process hands jobs to `sbatch` and follows them with `squeue`; workers train on
simulated GPUs behind Slurm's fake GPU devices."""

import re
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.accounts import ANA, throwaway_accounts
from tests.conftest import TINY_KERAS, command_spec
from tests.e2e.server import GPUQ, Server
from tests.e2e.sse import read_events
from tests.gpuq.snapshots.repos import make_repo
from tests.slurm.conftest import SlurmCluster, wait_for

SLEEP = "import time; time.sleep({})"
FINAL = {"succeeded", "failed", "cancelled", "timed_out"}
GRACE_S = 5


def slurm_server(slurm_cluster: SlurmCluster, home: Path, **env: str) -> Server:
    """A `gpuq serve` (not started) that hands its jobs to the test cluster."""
    server = Server(home)
    server.env.update(
        slurm_cluster.env,
        GPUQ_EXECUTOR="slurm",
        GPUQ_SLURM_PARTITION=slurm_cluster.partition,
        GPUQ_GPUS=f"sim:{slurm_cluster.gpus}x8GiB",
        GPUQ_SLURM_POLL_S="0.3",
        GPUQ_SLURM_POLL_MAX_S="2",
        GPUQ_CANCEL_GRACE_S=str(GRACE_S),
        GPUQ_ACTIVE_POLL_S="0.1",
    )
    server.env.update(env)
    return server


@pytest.fixture
def server(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[Server]:
    server = slurm_server(slurm_cluster, tmp_path / "gpuq")
    server.start()
    yield server
    try:  # leave the node free for the next test
        if server.proc is not None and server.proc.poll() is None:
            for job in _jobs(server):
                if job["status"] not in FINAL:
                    httpx.post(f"{server.url}/v1/jobs/{job['id']}/cancel")
            for job in _jobs(server):
                if job["status"] not in FINAL:
                    server.wait(job["id"], FINAL, timeout_s=30)
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()


def _jobs(server: Server) -> list[dict[str, Any]]:
    return httpx.get(f"{server.url}/v1/jobs", params={"limit": 500}).json()["jobs"]


def submit(server: Server, spec: dict[str, Any]) -> int:
    response = httpx.post(f"{server.url}/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def get(server: Server, job_id: int) -> dict[str, Any]:
    return httpx.get(f"{server.url}/v1/jobs/{job_id}").json()


def until(
    server: Server, job_id: int, check: Callable[[dict[str, Any]], Any], timeout_s: float = 90
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job = get(server, job_id)
        if check(job):
            return job
        assert time.monotonic() < deadline, f"job {job_id} never got there: {job}"
        time.sleep(0.2)


def slurm_until(cluster: SlurmCluster, slurm_id: str, key: str, value: str) -> None:
    wait_for(
        f"Slurm job {slurm_id} with {key}={value}",
        lambda: cluster.show_job(slurm_id).get(key) == value,
        timeout_s=20,
    )


def keras(gpus: int, **keras_fields: Any) -> dict[str, Any]:
    return {
        "name": "slurm-keras",
        "keras": {**TINY_KERAS, **keras_fields},
        "resources": {"gpus": gpus},
    }


def fill_the_node(server: Server, cluster: SlurmCluster) -> int:
    whole = submit(server, command_spec(SLEEP.format(300), gpus=cluster.gpus))
    until(server, whole, lambda j: j["status"] == "running")
    return whole


def test_a_keras_job_on_two_gpus_trains_through_slurm(server, slurm_cluster):
    job_id = submit(server, keras(2))
    statuses = []
    with httpx.Client(timeout=120) as client:
        for event in read_events(client, f"{server.url}/v1/events", job=job_id):
            statuses.append(event["data"]["status"])
            if statuses[-1] in FINAL:
                break
    job = get(server, job_id)
    assert job["status"] == "succeeded", job
    assert statuses[-1] == "succeeded" and "running" in statuses
    assert job["num_replicas"] == 2
    assert job["executor"] == "slurm" and job["executor_job_id"].isdigit()
    listed = httpx.get(f"{server.url}/v1/jobs/{job_id}/artifacts").json()["artifacts"]
    names = {a["name"] for a in listed}
    assert any(name.startswith("model") for name in names), names
    # Slurm ran gpuq's runner as the batch step of a job with the 2 GPUs asked for.
    details = slurm_cluster.show_job(job["executor_job_id"])
    assert details["JobName"] == f"gpuq-{job_id}"
    assert "gpu:2" in (details.get("TresPerNode", "") + details.get("Gres", ""))
    assert f"executor: slurm, job id {job['executor_job_id']}" in server.cli("show", str(job_id))
    assert "epoch" in server.cli("logs", "-f", str(job_id)).lower()
    nodes = httpx.get(f"{server.url}/v1/gpus").json()
    assert [(n["node"], n["gpus"]) for n in nodes] == [(slurm_cluster.node, slurm_cluster.gpus)]


def test_a_jobs_cores_and_host_memory_are_slurms_to_fence(server, slurm_cluster):
    """The spec means the same on both: Slurm's own cgroups hold the job to them there."""
    job_id = submit(server, command_spec(SLEEP.format(0), gpus=1, cpus=2.5, host_memory_mb=512))
    job = until(server, job_id, lambda j: j["status"] in FINAL)
    assert job["status"] == "succeeded", job
    assert (job["cpus"], job["host_memory_mb"]) == (2.5, 512)
    details = slurm_cluster.show_job(job["executor_job_id"])
    assert details["NumCPUs"] == "3"  # whole cores: Slurm counts no fractions
    assert details["MinMemoryNode"] == "512M"


def test_a_job_waits_with_slurms_reason_while_the_node_is_full(server, slurm_cluster):
    whole = fill_the_node(server, slurm_cluster)
    waiting = submit(server, command_spec(SLEEP.format(0), gpus=1))
    job = until(server, waiting, lambda j: j["wait_reason"] == "Slurm: Resources")
    assert job["status"] == "queued"
    assert job["executor_job_id"].isdigit()
    deadline = time.monotonic() + 10  # `sinfo`'s answer is kept a moment
    while (node := httpx.get(f"{server.url}/v1/gpus").json()[0])["gpus_free"]:
        assert time.monotonic() < deadline, node
        time.sleep(0.5)
    assert node["gpus_allocated"] == slurm_cluster.gpus  # state "mixed": CPUs are left

    began = time.monotonic()
    assert httpx.post(f"{server.url}/v1/jobs/{whole}/cancel").status_code == 202
    ended = until(server, whole, lambda j: j["status"] in FINAL)
    assert (ended["status"], ended["reason"]) == ("cancelled", "cancelled_by_user")
    assert time.monotonic() - began < GRACE_S + 5
    # With the GPUs free, Slurm starts the waiting job and it finishes.
    assert until(server, waiting, lambda j: j["status"] in FINAL)["status"] == "succeeded"


def test_a_cancel_of_a_waiting_job_takes_it_back_from_slurm(server, slurm_cluster):
    fill_the_node(server, slurm_cluster)
    waiting = submit(server, command_spec(SLEEP.format(0), gpus=1))
    slurm_id = until(server, waiting, lambda j: j["executor_job_id"])["executor_job_id"]
    assert httpx.post(f"{server.url}/v1/jobs/{waiting}/cancel").status_code == 202
    assert get(server, waiting)["status"] == "cancelled"
    slurm_until(slurm_cluster, slurm_id, "JobState", "CANCELLED")


def test_holds_dependencies_and_priorities_reach_slurm(server, slurm_cluster):
    whole = fill_the_node(server, slurm_cluster)
    first = submit(server, command_spec(SLEEP.format(1), gpus=1))
    second = submit(server, {**command_spec(SLEEP.format(0), gpus=1), "depends_on": [first]})
    held = submit(server, command_spec(SLEEP.format(0), gpus=1))
    assert httpx.post(f"{server.url}/v1/jobs/{held}/hold").status_code == 200
    held_id = until(server, held, lambda j: j["executor_job_id"])["executor_job_id"]
    until(server, held, lambda j: "Held" in (j["wait_reason"] or ""))

    first_id = until(server, first, lambda j: j["executor_job_id"])["executor_job_id"]
    second_id = until(server, second, lambda j: j["executor_job_id"])["executor_job_id"]
    assert slurm_cluster.show_job(second_id)["Dependency"].startswith(f"afterok:{first_id}")

    assert slurm_cluster.show_job(second_id)["Nice"] == "1000"
    patched = httpx.patch(f"{server.url}/v1/jobs/{second}", json={"priority": -5})
    assert patched.status_code == 200, patched.text
    slurm_until(slurm_cluster, second_id, "Nice", "1005")
    lowered = httpx.patch(f"{server.url}/v1/jobs/{held}", json={"priority": -7})
    assert lowered.status_code == 200, lowered.text

    httpx.post(f"{server.url}/v1/jobs/{whole}/cancel")
    assert until(server, second, lambda j: j["status"] in FINAL)["status"] == "succeeded"
    assert get(server, first)["status"] == "succeeded"
    assert get(server, held)["status"] == "queued"  # still held, with GPUs free
    assert httpx.post(f"{server.url}/v1/jobs/{held}/release").status_code == 200
    assert until(server, held, lambda j: j["status"] in FINAL)["status"] == "succeeded"
    assert slurm_cluster.show_job(held_id)["Nice"] == "1007"  # applied on release


def test_a_time_limit_ends_timed_out_with_a_checkpoint(server, slurm_cluster):
    job_id = submit(server, {**keras(1, epochs=100_000), "time_limit_s": 8})
    job = until(server, job_id, lambda j: j["status"] in FINAL, timeout_s=120)
    assert (job["status"], job["reason"]) == ("timed_out", "time_limit"), job
    checkpoints = server.home / "runs" / str(job_id) / "1" / "checkpoints"
    assert any(checkpoints.iterdir()), "no checkpoint was written"


def test_kill_9_of_serve_mid_job_then_restart_finishes_the_job(server, slurm_cluster):
    data = {**TINY_KERAS["data"], "samples": 49152}  # epochs of a second or two
    job_id = submit(server, keras(1, epochs=6, data=data))
    until(server, job_id, lambda j: j["status"] == "running", timeout_s=120)
    server.kill(signal.SIGKILL)
    time.sleep(3)  # training goes on under Slurm while gpuq is down
    server.start()
    job = until(server, job_id, lambda j: j["status"] in FINAL, timeout_s=180)
    assert job["status"] == "succeeded", job
    history = httpx.get(f"{server.url}/v1/jobs/{job_id}/metrics").json()
    assert [e["epoch"] for e in history["epochs"]] == [1, 2, 3, 4, 5, 6]


def test_a_job_slurm_forgot_without_an_exit_record_is_worker_lost(server, slurm_cluster):
    job_id = submit(server, command_spec(SLEEP.format(300), gpus=1))
    slurm_id = until(server, job_id, lambda j: j["status"] == "running")["executor_job_id"]
    server.kill(signal.SIGKILL)
    # The job dies with its node, before the runner can write exit.json; then Slurm forgets
    # it, as it does `MinJobAge` after the end. Here: the job killed, the record the runner
    # may have written in that moment removed, and gpuq's record pointed at an id Slurm
    # never had.
    slurm_cluster.run("scancel", "--full", "--signal=KILL", slurm_id)
    slurm_until(slurm_cluster, slurm_id, "JobState", "CANCELLED")
    (server.home / "runs" / str(job_id) / "1" / "exit.json").unlink(missing_ok=True)
    with sqlite3.connect(server.home / "gpuq.db") as db:
        db.execute("UPDATE job SET executor_job_id = '999999' WHERE id = ?", (job_id,))
    server.start()
    job = until(server, job_id, lambda j: j["status"] in FINAL)
    assert (job["status"], job["reason"]) == ("failed", "worker_lost"), job
    assert "no longer knows job 999999" in job["message"]


def test_jobs_no_node_can_run_are_refused_at_submit(server, slurm_cluster):
    too_big = command_spec("pass", gpus=slurm_cluster.gpus + 1)
    response = httpx.post(f"{server.url}/v1/jobs", json=too_big)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "resources", "gpus"]
    pinned = httpx.post(f"{server.url}/v1/jobs", json=command_spec("pass", gpu_ids=[0]))
    assert pinned.status_code == 422
    assert "Slurm chooses the GPUs" in pinned.json()["detail"][0]["msg"]


def test_a_drained_box_hands_nothing_to_slurm_until_resumed(server, slurm_cluster):
    drain = httpx.post(f"{server.url}/v1/admin/drain", json={"gpus": None, "reason": "upgrade"})
    assert drain.status_code == 200, drain.text
    one_gpu = httpx.post(f"{server.url}/v1/admin/drain", json={"gpus": [0], "reason": None})
    assert one_gpu.status_code == 409 and "scontrol update nodename=" in one_gpu.text
    waiting = submit(server, keras(1))
    job = until(server, waiting, lambda j: j["wait_reason"])
    assert job["wait_reason"].startswith("the box is drained for maintenance by anonymous")
    assert job["executor_job_id"] is None

    assert httpx.post(f"{server.url}/v1/admin/resume", json={"gpus": None}).json() == []
    until(server, waiting, lambda j: j["executor_job_id"])
    # A `not_before` job stays with gpuq until then, and is handed over after.
    not_before = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    later = submit(server, {**keras(1), "not_before": not_before.isoformat()})
    job = until(server, later, lambda j: j["wait_reason"] or j["executor_job_id"])
    assert job["wait_reason"].startswith("not before ") and job["executor_job_id"] is None
    until(server, later, lambda j: j["executor_job_id"])


def test_under_run_as_owner_slurm_runs_the_job_as_its_owner(slurm_cluster):
    """`sbatch --uid/--gid` from root: Slurm itself runs the job as ana."""
    # slurmd runs the batch script from its spool, under the cluster's folder.
    with throwaway_accounts(reachable=[slurm_cluster.dir / "spool"]) as accounts:
        # A GPUQ_HOME ana can pass through.
        server = slurm_server(slurm_cluster, accounts.scratch / "gpuq", GPUQ_RUN_AS="owner")
        server.home.mkdir()
        token = server.cli("users", "add", "ana", "--unix-user", ANA).splitlines()[-1]
        server.start()
        try:
            code = "import os; print('uid', os.getuid(), 'home', os.environ['HOME'])"
            response = httpx.post(
                f"{server.url}/v1/jobs",
                json=command_spec(code, gpus=1),
                headers={"Authorization": f"Bearer {token}"},
            )
            assert response.status_code == 201, response.text
            server.env["GPUQ_TOKEN"] = token
            job = server.wait(response.json()["id"], FINAL, timeout_s=120)
            assert job["status"] == "succeeded", (job["reason"], job["message"], job["log_tail"])
            log = server.cli("logs", str(job["id"]))
            assert f"uid {accounts.ana.pw_uid} home {accounts.ana.pw_dir}" in log
            run = server.home / "runs" / str(job["id"]) / "1"
            assert (run / "exit.json").stat().st_uid == accounts.ana.pw_uid
        finally:
            server.kill()


def test_gpuq_run_goes_through_slurm_and_gpuq_shell_names_salloc(server, tmp_path):
    def gpuq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*GPUQ, *args],
            env=server.env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    (tmp_path / "hello.py").write_text(
        "import os; print('on', os.environ['SLURM_JOB_ID']); exit(3)"
    )
    done = gpuq("run", "--gpus", "1", "--", "python", "hello.py")
    assert done.returncode == 3, done.stderr
    assert re.fullmatch(r"on \d+\n", done.stdout), done.stdout
    assert "gpuq: job 1 failed (nonzero_exit)" in done.stderr

    refused = gpuq("shell", "--gpus", "1")
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert "salloc --gpus=N" in refused.stderr


def test_a_sweep_hands_slurm_one_member_at_a_time_and_stops_a_hopeless_one(server):
    code = (
        "import os, time; from gpuq import report; n = int(os.environ['GPUQ_PARAM_N'])\n"
        "for epoch in range(1, 5): time.sleep(0.5); report(epoch, loss=n / epoch)"
    )
    spec = {
        **command_spec(code, gpus=1),
        "name": "slurm-sweep",
        "sweep": {
            "search": "list",
            "points": [{"n": 2}, {"n": 50}, {"n": 1}],  # the last one judged beats the first
            "max_parallel": 1,
            "metric": "loss",
            "early_stopping": {"grace_epochs": 1, "min_members": 1},
        },
    }
    response = httpx.post(f"{server.url}/v1/sweeps", json=spec)
    assert response.status_code == 201, response.text
    sweep = response.json()
    ids = sorted(m["job_id"] for m in sweep["members"])
    for job_id in ids:
        until(server, job_id, lambda j: j["status"] in FINAL, timeout_s=120)
    jobs = [get(server, job_id) for job_id in ids]
    board = httpx.get(f"{server.url}/v1/sweeps/{sweep['id']}").json()
    assert [j["status"] for j in jobs] == ["succeeded", "cancelled", "succeeded"]
    assert jobs[1]["reason"] == "early_stopped"
    assert "trailed the median" in jobs[1]["message"]
    assert all(j["executor"] == "slurm" for j in jobs)
    assert len({j["executor_job_id"] for j in jobs}) == 3
    # One at a time: each started after the one before it ended.
    assert jobs[1]["started_at"] >= jobs[0]["finished_at"]
    assert jobs[2]["started_at"] >= jobs[1]["finished_at"]
    assert [m["job_id"] for m in board["members"]] == [ids[2], ids[0], ids[1]]
    assert board["best"]["params"] == {"n": 1}


def test_a_snapshot_job_runs_its_copy_on_the_slurm_node(server, tmp_path):
    """The run folder is on the file system the nodes share: the copy unpacked there."""
    project = make_repo(
        tmp_path / "project",
        {"sub/hello.py": "import os; print('in', os.getcwd(), open('V').read())", "sub/V": "v1"},
    )
    env = {**server.env, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    done = subprocess.run(
        [*GPUQ, "run", "--gpus", "1", "--", "python", "hello.py"],
        env=env,
        cwd=project / "sub",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "gpuq: snapshot " in done.stderr
    assert re.search(r"^in /\S+/code/sub v1$", done.stdout, re.M), done.stdout
