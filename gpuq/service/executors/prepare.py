"""Writing an attempt's run directory: the same for every executor."""

import os
import shutil
from pathlib import Path

from gpuq.contract.rundir import RunDir, write_json_atomic
from gpuq.contract.runspec import RunSpec, runner_environment
from gpuq.service.executors.base import Launch


def prepare_run(runs_dir: Path, launch: Launch) -> tuple[RunDir, dict[str, str]]:
    """Writes the attempt's run directory and returns it with its runner's environment. A
    retry gets a copy of the previous attempt's checkpoints to resume from (that attempt's
    own files stay as they were)."""
    run = RunDir.of(runs_dir, launch.job_id, launch.attempt)
    runspec = RunSpec(
        job_id=launch.job_id, attempt=launch.attempt, spec=launch.spec, devices=launch.devices
    )
    run.create()
    if launch.resume_from is not None:
        previous = RunDir.of(runs_dir, launch.job_id, launch.resume_from)
        if previous.checkpoints.is_dir():
            shutil.copytree(previous.checkpoints, run.checkpoints, dirs_exist_ok=True)
    # Not durable: after a power cut the attempt is over whatever this file says.
    write_json_atomic(run.spec, runspec.model_dump(mode="json"), durable=False)
    return run, runner_environment(os.environ, runspec, run)
