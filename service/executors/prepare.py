"""Writing an attempt's run directory: the same for every executor."""

import os
import shutil
from pathlib import Path

from gpuq.contract.account import Account
from gpuq.contract.rundir import RunDir, write_json_atomic
from gpuq.contract.runspec import RunSpec, runner_environment
from service.executors.base import Launch

#: what a job owner's environment does not inherit from gpuq's (running as root)
NOT_INHERITED = ("SUDO_", "MAIL")


def prepare_run(runs_dir: Path, launch: Launch) -> tuple[RunDir, dict[str, str]]:
    """Writes the attempt's run directory and returns it with its runner's environment. A
    retry gets a copy of the previous attempt's checkpoints to resume from (that attempt's
    own files stay as they were). A job run as its owner gets a run directory that is the
    owner's alone (gpuq, as root, still reads it)."""
    run = RunDir.of(runs_dir, launch.job_id, launch.attempt)
    runspec = RunSpec(
        job_id=launch.job_id,
        attempt=launch.attempt,
        spec=launch.spec,
        devices=launch.devices,
        data_roots=None if launch.data_roots is None else list(launch.data_roots),
        step_timeout_s=launch.step_timeout_s,
    )
    # Left by a start whose claim never committed (gpuq stopped in between, and `reconcile`
    # ended that runner): this attempt starts afresh.
    if run.path.is_symlink():
        run.path.unlink()
    elif run.path.is_dir():
        shutil.rmtree(run.path)
    run.create()
    if launch.resume_from is not None:
        previous = RunDir.of(runs_dir, launch.job_id, launch.resume_from)
        # The job's own processes could have made the folder, or links in it, point
        # anywhere: a link is copied as a link, never followed.
        if previous.checkpoints.is_dir() and not previous.checkpoints.is_symlink():
            shutil.copytree(
                previous.checkpoints, run.checkpoints, symlinks=True, dirs_exist_ok=True
            )
    # Not durable: after a power cut the attempt is over whatever this file says.
    write_json_atomic(run.spec, runspec.model_dump(mode="json"), durable=False)
    run.log.touch()
    env = runner_environment(os.environ, runspec, run)
    if launch.run_as is not None:
        # The job's folder stays gpuq's (so the owner cannot swap an attempt's folder for a
        # link); each attempt's folder is the owner's alone.
        run.path.parent.chmod(0o711)
        give_to(launch.run_as, run.path)
        env = {k: v for k, v in env.items() if not k.startswith(NOT_INHERITED)}
        env.update(launch.run_as.environment())
    return run, env


def give_to(account: Account, folder: Path) -> None:
    """Makes `folder` and everything in it `account`'s alone: owner, group, no access for
    anyone else."""
    for path in (folder, *folder.rglob("*")):
        os.chown(path, account.uid, account.gid, follow_symlinks=False)
        if not path.is_symlink():
            path.chmod(0o700 if path.is_dir() else 0o600)
