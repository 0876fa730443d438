"""How a job's nodes find each other and which one a failing job's end is blamed on."""

import errno
import importlib.util
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuq.contract.nodes import (
    HeldPort,
    NodeEnd,
    announcement,
    end_path,
    job_end,
    meet,
    read_announcements,
    world_environment,
)
from gpuq.contract.outcome import classify
from gpuq.contract.rundir import RunDir, write_json_atomic
from gpuq.contract.states import JobStatus, Reason


def _world(run: RunDir, names: list[str]) -> list[dict]:
    (run.path / "nodes").mkdir(parents=True, exist_ok=True)
    for rank, name in enumerate(names):
        record = announcement(
            rank,
            name,
            address=f"10.0.0.{rank + 1}",
            port=40000 + rank,
            master_port=41000 if rank == 0 else None,
            gpus="0,1",
        )
        write_json_atomic(run.path / "nodes" / f"{rank}.json", record)
    return read_announcements(run, len(names))


def _end(run: RunDir, rank: int, node: str, code: int | None, sig=None, at=0.0, stopped=False):
    end = NodeEnd(rank, node, code, sig, at, stopped)
    write_json_atomic(end_path(run, rank), end.to_dict())


def test_every_node_gets_tensorflows_and_torchruns_view_of_the_same_world(tmp_path: Path):
    run = RunDir(tmp_path)
    world = _world(run, ["n9", "n10"])  # Slurm's order, not sorted by name
    env = world_environment(world, 1)
    tf_config = json.loads(env["TF_CONFIG"])
    assert tf_config == {
        "cluster": {"worker": ["10.0.0.1:40000", "10.0.0.2:40001"]},
        "task": {"type": "worker", "index": 1},
    }
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.1", "41000")
    assert (env["WORLD_SIZE"], env["RANK"], env["NODE_RANK"], env["LOCAL_RANK"]) == (
        "2",
        "1",
        "1",
        "0",
    )
    assert (env["GPUQ_NODES"], env["GPUQ_NODE_RANK"], env["GPUQ_NODE"]) == ("2", "1", "n10")


def test_a_partial_world_is_not_taken_for_a_whole_one(tmp_path: Path):
    run = RunDir(tmp_path)
    _world(run, ["n1", "n2"])
    (run.path / "nodes" / "1.json").write_text('{"rank": 1, "no')  # half written
    assert [w["rank"] for w in read_announcements(run, 2)] == [0]


def test_all_nodes_succeeding_is_a_success(tmp_path: Path):
    run = RunDir(tmp_path)
    _world(run, ["n1", "n2"])
    _end(run, 0, "n1", 0)
    _end(run, 1, "n2", 0)
    assert job_end(run, 2, 0)["exit_code"] == 0
    assert "node" not in job_end(run, 2, 0)


def test_the_node_that_failed_on_its_own_is_blamed_not_the_ones_slurm_then_stopped(
    tmp_path: Path,
):
    run = RunDir(tmp_path)
    _world(run, ["n1", "n2"])
    _end(run, 1, "n2", None, sig=9, at=10.0)  # its training process was killed
    _end(run, 0, "n1", 143, at=10.5, stopped=True)  # then srun stopped the chief
    end = job_end(run, 2, 137)
    assert (end["node"], end["node_rank"], end["signal"]) == ("n2", 1, 9)
    judged = classify(exit_info=end, detail=None, stop_reason=None, time_limit_s=None)
    assert (judged.status, judged.reason) == (JobStatus.failed, Reason.signal)
    assert judged.message.startswith("node n2: the training process was killed by SIGKILL")


def test_a_node_that_left_no_end_is_lost_and_named(tmp_path: Path):
    run = RunDir(tmp_path)
    _world(run, ["n1", "n2"])
    _end(run, 0, "n1", 143, at=3.0, stopped=True)
    end = job_end(run, 2, 137)
    assert (end["node"], end["node_lost"]) == ("n2", True)
    judged = classify(exit_info=end, detail="chief's words", stop_reason=None, time_limit_s=None)
    assert (judged.status, judged.reason) == (JobStatus.failed, Reason.worker_lost)
    assert judged.message.startswith("node n2: its gpuq worker ended")


def test_a_failing_command_on_a_node_is_a_nonzero_exit_named_after_it(tmp_path: Path):
    run = RunDir(tmp_path)
    _world(run, ["n1", "n2"])
    _end(run, 0, "n1", 0, at=1.0)
    _end(run, 1, "n2", 3, at=2.0)
    judged = classify(
        exit_info=job_end(run, 2, 3),
        detail="the chief's own words",
        stop_reason=None,
        time_limit_s=None,
        builtin=False,
    )
    assert (judged.reason, judged.exit_code) == (Reason.nonzero_exit, 3)
    assert judged.message == "node n2: the program exited with code 3"


def test_when_every_node_was_stopped_the_chief_speaks_for_the_job(tmp_path: Path):
    run = RunDir(tmp_path)
    _world(run, ["n1", "n2"])
    _end(run, 0, "n1", 75, at=1.0, stopped=True)
    _end(run, 1, "n2", 75, at=1.1, stopped=True)
    end = job_end(run, 2, 75)
    assert end["exit_code"] == 75 and "node" not in end


def test_no_node_ever_ran_is_a_launch_error(tmp_path: Path):
    run = RunDir(tmp_path)
    end = job_end(run, 2, 1)
    judged = classify(exit_info=end, detail=None, stop_reason=None, time_limit_s=None)
    assert judged.reason == Reason.launch_error
    assert "srun exited 1" in judged.message


def test_a_node_that_waits_in_vain_names_the_ranks_missing(tmp_path: Path):
    run = RunDir(tmp_path)
    record = announcement(1, "n2", address="10.0.0.2", port=40001, master_port=None, gpus="0")
    with pytest.raises(TimeoutError) as raised:
        meet(run, record, 3, 0.2, "is GPUQ_HOME shared?")
    assert str(raised.value) == (
        f"node ranks [0, 2] did not announce themselves in {tmp_path / 'nodes'} within 0.2 s: "
        "is GPUQ_HOME shared?"
    )
    assert read_announcements(run, 3) == [record]


def test_a_lost_node_that_never_announced_itself_is_named_by_its_rank(tmp_path: Path):
    run = RunDir(tmp_path)
    _world(run, ["n1"])
    _end(run, 0, "n1", 143, at=3.0, stopped=True)
    end = job_end(run, 2, 137)
    assert "node" not in end and (end["node_rank"], end["node_lost"]) == (1, True)
    judged = classify(exit_info=end, detail=None, stop_reason=None, time_limit_s=None)
    assert judged.reason == Reason.worker_lost
    assert judged.message.startswith("node rank 1: its gpuq worker ended")


def test_a_held_port_cannot_be_taken_by_another_binder_until_it_is_let_go():
    # free_port's race: the port was found free, let go, and then anyone could bind it
    # before the job's program did.
    held = HeldPort()
    hosts = [(socket.AF_INET, "")] + ([(socket.AF_INET6, "::")] if socket.has_ipv6 else [])
    try:
        for family, host in hosts:
            with socket.socket(family) as other, pytest.raises(OSError) as refused:
                other.bind((host, held.port))
            assert refused.value.errno == errno.EADDRINUSE
    finally:
        held.close()
    with socket.socket() as other:
        other.bind(("", held.port))


# Each starts its framework's server on the port in argv[1], as a job's program does with
# TF_CONFIG's port or MASTER_PORT, and reaches it: exit 0 only if it could bind and listen.
SERVERS = {
    "tensorflow": (
        "import socket, sys, tensorflow as tf\n"
        "cluster = tf.train.ClusterSpec({'worker': [f'localhost:{sys.argv[1]}']})\n"
        "server = tf.distribute.Server(cluster, job_name='worker', task_index=0)\n"
        "socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=10).close()\n"
    ),
    "torch": (
        "import datetime, sys, torch.distributed as dist\n"
        "store = dist.TCPStore('127.0.0.1', int(sys.argv[1]), 1, True,\n"
        "                      timeout=datetime.timedelta(seconds=10))\n"
        "store.set('k', 'v')\n"
        "assert store.get('k') == b'v'\n"
    ),
}


@pytest.mark.parametrize("framework", sorted(SERVERS))
def test_the_jobs_program_can_serve_on_the_port_held_for_it(framework: str):
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    held = HeldPort()
    try:
        served = subprocess.run(
            [sys.executable, "-c", SERVERS[framework], str(held.port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        held.close()
    assert served.returncode == 0, served.stderr[-2000:]
