"""Every job in cgroups of its own, on this machine's real cgroup v1 controllers (as root):
the kernel, not a polite request, holds a job to its host memory, cores, processes and
GPU devices, and gpuq finds and stops a job's processes through them, after a restart too.
"""

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import command_spec, ended, serving, wait_for
from tests.e2e.server import Server
from tests.fakes import FakeNvml
from tests.processes import gone

pytestmark = pytest.mark.e2e


def submit(client, spec) -> int:
    response = client.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def said(settings, job_id: int, attempt: int = 1) -> dict:
    """The JSON line the job's program printed last."""
    log = settings.runs_dir / str(job_id) / str(attempt) / "output.log"
    lines = [line for line in log.read_text().splitlines() if line.startswith("{")]
    assert lines, log.read_text()
    return json.loads(lines[-1])


def oom_score_adj(pid: int) -> int:
    return int(Path(f"/proc/{pid}/oom_score_adj").read_text())


def may_lower_oom_scores() -> bool:
    """Whether this process has CAP_SYS_RESOURCE (bit 24), which lowering a score takes."""
    status = Path("/proc/self/status").read_text()
    effective = next(line for line in status.splitlines() if line.startswith("CapEff:"))
    return bool(int(effective.split()[1], 16) >> 24 & 1)


def test_a_job_over_its_host_memory_ends_host_oom_and_its_neighbour_and_gpuq_live_on(
    client, settings
):
    neighbour = submit(
        client, command_spec("import time; time.sleep(6); print('done')", gpu_ids=[1])
    )
    greedy = submit(
        client,
        command_spec(
            "x = bytearray(600 * 2**20)\nfor i in range(0, len(x), 4096): x[i] = 1",
            gpu_ids=[0],
            host_memory_mb=200,
        ),
    )
    job = wait_for(client, greedy, ended, timeout_s=60)
    assert (job["status"], job["reason"]) == ("failed", "host_oom"), job["message"]
    assert "host_memory_mb 200" in job["message"], job["message"]
    assert "--host-mem" in job["message"]
    assert 150 <= job["host_memory_peak_mb"] <= 200, job
    assert client.get("/healthz").status_code == 200
    assert wait_for(client, neighbour, ended)["status"] == "succeeded"


def test_one_core_holds_two_busy_threads_to_about_one(client, settings):
    program = """
import json, os, threading, time
def spin(until):
    while time.monotonic() < until:
        pass
until = time.monotonic() + 3
threads = [threading.Thread(target=spin, args=(until,)) for _ in range(2)]
began, cpu = time.monotonic(), time.process_time()
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"wall": time.monotonic() - began, "cpu": time.process_time() - cpu}))
"""
    job_id = submit(client, command_spec(program, gpus=0, cpus=1))
    job = wait_for(client, job_id, ended, timeout_s=60)
    assert job["status"] == "succeeded", job
    assert job["cpus"] == 1
    measured = said(settings, job_id)
    # Two spinning threads would use two cores' worth; the quota gives one.
    assert measured["cpu"] <= 1.25 * measured["wall"], measured
    assert job["cpu_time_s"] >= 0.7 * measured["cpu"], job


def test_one_core_cannot_start_a_513th_process(client, settings):
    program = """
import errno, json, os, signal, time
children = []
error = None
while len(children) < 600:
    try:
        pid = os.fork()
    except OSError as exc:
        error = errno.errorcode[exc.errno]
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children.append(pid)
print(json.dumps({"started": len(children), "error": error}), flush=True)
for pid in children:
    os.kill(pid, signal.SIGKILL)
"""
    job_id = submit(client, command_spec(program, gpus=0, cpus=1))
    job = wait_for(client, job_id, ended, timeout_s=90)
    assert job["status"] == "succeeded", job
    measured = said(settings, job_id)
    # pids.max 512 for one core: the runner and the program are two of them.
    assert measured["error"] == "EAGAIN", measured
    assert 490 <= measured["started"] <= 510, measured


def test_a_job_opens_only_its_own_gpus_device_node(client, settings, tmp_path):
    nodes = tmp_path / "dev"
    nodes.mkdir()
    for minor in (0, 1):
        os.mknod(nodes / f"nvidia{minor}", 0o666 | 0o020000, os.makedev(195, minor))
    program = f"""
import errno, json, os
seen = {{}}
for minor in (0, 1):
    try:
        os.close(os.open("{nodes}/nvidia%d" % minor, os.O_RDWR))
        seen[minor] = "opened"
    except OSError as exc:
        seen[minor] = errno.errorcode[exc.errno]
print(json.dumps(seen))
"""
    job_id = submit(client, command_spec(program, gpu_ids=[0]))
    assert wait_for(client, job_id, ended)["status"] == "succeeded"
    seen = said(settings, job_id)
    assert seen["1"] == "EPERM", seen  # another job's GPU: the fence says no
    assert seen["0"] != "EPERM", seen  # its own: no driver here, but the fence lets it try


def test_a_jobs_cgroups_hold_what_it_got_while_it_runs_and_go_when_it_ends(client, settings):
    program = (
        "import json, os, time\n"
        "names = ('GPUQ_FENCE', 'OMP_NUM_THREADS', 'TF_NUM_INTRAOP_THREADS')\n"
        "print(json.dumps({name: os.environ[name] for name in names}), flush=True)\n"
        "time.sleep(30)"
    )
    job_id = submit(client, command_spec(program, gpus=0, cpus=0.5, host_memory_mb=300))
    wait_for(client, job_id, lambda j: j["status"] == "running")
    deadline = time.monotonic() + 20
    while not (settings.runs_dir / str(job_id) / "1" / "output.log").read_text():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    env = said(settings, job_id)
    assert (env["OMP_NUM_THREADS"], env["TF_NUM_INTRAOP_THREADS"]) == ("1", "1")
    folders = [Path(f) for f in env["GPUQ_FENCE"].split(":")]
    by_controller = {f.parent.parent.name: f for f in folders}
    limit = int((by_controller["memory"] / "memory.limit_in_bytes").read_text())
    assert limit == 300 * 2**20
    quota = int((by_controller["cpu"] / "cpu.cfs_quota_us").read_text())
    period = int((by_controller["cpu"] / "cpu.cfs_period_us").read_text())
    assert quota == period // 2
    # The box says what the job holds of it, and so does /metrics.
    host = client.get("/v1/host").json()
    assert host["jobs"] == [
        {"id": job_id, "owner": "anonymous", "cpus": 0.5, "host_memory_mb": 300}
    ]
    assert (host["cpus_held"], host["memory_held_mb"]) == (0.5, 300)
    assert host["memory_free_mb"] == host["memory_total_mb"] - 1024 - 300
    metrics = client.get("/metrics").text
    assert 'gpuq_host_cpus{state="held"} 0.5' in metrics
    assert f'gpuq_job_host_memory_bytes{{job="{job_id}",owner="anonymous"}} 3.145728e+08' in (
        metrics
    )
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    assert wait_for(client, job_id, ended)["status"] == "cancelled"
    assert not any(f.exists() for f in folders), folders


def test_after_kill_9_of_gpuq_a_jobs_escaped_process_is_found_and_stopped_through_its_cgroup(
    tmp_path,
):
    """The job's program double-forks a process into a session of its own (out of the
    job's process group); gpuq dies by SIGKILL; the next gpuq takes the job back, and
    cancelling it stops the escapee too."""
    pidfile = tmp_path / "escapee.pid"
    program = f"""
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open("{pidfile}.tmp", "w").write(str(os.getpid()))
        os.rename("{pidfile}.tmp", "{pidfile}")
        time.sleep(600)
    os._exit(0)
time.sleep(600)
"""
    server = Server(tmp_path / "gpuq")
    server.start()
    try:
        job_id = httpx.post(f"{server.url}/v1/jobs", json=command_spec(program, gpus=0)).json()[
            "id"
        ]
        server.wait(job_id, {"running"})
        deadline = time.monotonic() + 20
        while not pidfile.exists():
            assert time.monotonic() < deadline, "the escapee never started"
            time.sleep(0.05)
        escapee = int(pidfile.read_text())
        # The kernel's OOM killer takes a job's process long before gpuq's own (which
        # lowers its score where it may: CAP_SYS_RESOURCE, which this machine's root lacks).
        assert server.proc is not None
        spared = -500 if may_lower_oom_scores() else 0
        assert (oom_score_adj(server.proc.pid), oom_score_adj(escapee)) == (spared, 200)
        server.kill(signal.SIGKILL)
        assert not gone(escapee)
        server.start()
        server.wait(job_id, {"running"})
        assert httpx.post(f"{server.url}/v1/jobs/{job_id}/cancel").status_code == 202
        assert server.wait(job_id, {"cancelled"})["reason"] == "cancelled_by_user"
        deadline = time.monotonic() + 15
        while not gone(escapee):
            assert time.monotonic() < deadline, "the escapee outlived its job"
            time.sleep(0.05)
    finally:
        server.kill()


def test_on_a_box_of_two_numa_nodes_a_job_runs_on_the_cores_nearest_its_gpu(settings):
    """NVML (a stand-in here) says core 0 is GPU 0's node and core 1 GPU 1's."""
    fake = FakeNvml(near_cores={0: (0,), 1: (1,)})
    program = "import os; print(json.dumps({'cores': sorted(os.sched_getaffinity(0))}))"
    with serving(settings, probe=fake) as client:
        job_id = submit(client, command_spec("import json\n" + program, gpu_ids=[1], cpus=1))
        assert wait_for(client, job_id, ended)["status"] == "succeeded"
    assert said(settings, job_id) == {"cores": [1]}
