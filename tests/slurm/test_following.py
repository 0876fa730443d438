"""How the Slurm executor tells the scheduler of a job's start and end, against the test
cluster's real `squeue`."""

import time

import pytest

from gpuq.contract.rundir import write_json_atomic
from service.executors.slurm.executor import SlurmExecutor
from service.settings import Settings
from tests.slurm.conftest import SlurmCluster


def test_a_job_that_started_and_ended_between_two_looks_is_reported_started_first(
    slurm_cluster: SlurmCluster, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short job can start, run and end between the step's look for started jobs and its
    look for ended ones: gpuq still has it queued, and cannot end it before it starts."""
    for name, value in slurm_cluster.env.items():
        monkeypatch.setenv(name, value)
    executor = SlurmExecutor(Settings(home=tmp_path / "gpuq", executor="slurm"))
    # A job Slurm no longer knows: to the executor's next look, it has ended.
    assert executor.adopt(7, 1, "999999")
    run = executor.run_dir(7, 1)
    run.create()
    write_json_atomic(run.runner, {"runner_pid": 1})
    write_json_atomic(run.exit, {"exit_code": 0, "signal": None, "finished_at": time.time()})
    assert executor.exited() == []
    assert executor.started() == [7]
    exits = executor.exited()
    assert [e.job_id for e in exits] == [7] and exits[0].record["exit_code"] == 0
    assert executor.started() == executor.exited() == []
