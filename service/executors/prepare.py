"""Writing an attempt's run directory: the same for every executor.

gpuq works as root, by path, only in folders that are still its own: an attempt's folder is
written in full and handed to the job's owner last; what comes from the owner's earlier
attempt (its checkpoints) is copied by the owner's own account.
"""

import math
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from gpuq.contract.account import UMASK, Account
from gpuq.contract.rundir import RunDir, write_json_atomic
from gpuq.contract.runspec import RunSpec, runner_environment
from service.executors.base import Launch, LaunchError
from service.executors.environment import inherited

#: how long copying an earlier attempt's checkpoints may take
COPY_TIMEOUT_S = 600


def prepare_run(
    runs_dir: Path, launch: Launch, files: Mapping[str, str] | None = None
) -> tuple[RunDir, dict[str, str]]:
    """Writes the attempt's run directory (with `files`: name → text, what the executor
    adds) and returns it with its runner's environment. A retry gets a copy of the previous
    attempt's checkpoints to resume from (that attempt's own files stay as they were). A job
    run as its owner gets a run directory that is the owner's alone (gpuq, as root, still
    reads it)."""
    run = RunDir.of(runs_dir, launch.job_id, launch.attempt)
    runspec = RunSpec(
        job_id=launch.job_id,
        attempt=launch.attempt,
        spec=launch.spec,
        devices=launch.devices,
        data_roots=None if launch.data_roots is None else list(launch.data_roots),
        step_timeout_s=launch.step_timeout_s,
        collective_timeout_s=launch.collective_timeout_s,
        params=None if launch.params is None else dict(launch.params),
    )
    # Left by a start whose claim never committed (gpuq stopped in between, and `reconcile`
    # ended that runner): this attempt starts afresh. (`rmtree` never follows a link.)
    if run.path.is_symlink():
        run.path.unlink()
    elif run.path.is_dir():
        shutil.rmtree(run.path)
    if launch.run_as is None and launch.resume_from is None:
        # Its folders are the runner's to make (`worker.launch_plan`), away from the
        # scheduler's thread, where each metadata write can wait on a commit's journal.
        run.path.mkdir(parents=True)
    else:
        run.create()  # given away, or copied into, below
    # Not durable: after a power cut the attempt is over whatever this file says.
    write_json_atomic(run.spec, runspec.model_dump(mode="json"), durable=False)
    run.log.touch()
    for name, text in (files or {}).items():
        (run.path / name).write_text(text)
    if launch.snapshot is not None:
        # gpuq's own copy, into a folder still gpuq's: the runner unpacks it as the owner
        try:
            shutil.copyfile(launch.snapshot, run.snapshot)
        except FileNotFoundError:
            raise LaunchError(f"its snapshot {launch.snapshot.stem} is no longer stored") from None
    env = runner_environment(inherited(os.environ, own_account=launch.run_as is None), runspec, run)
    env.update(thread_counts(launch.cpus))
    if launch.run_as is not None:
        # The job's folder stays gpuq's (so the owner cannot swap an attempt's folder for a
        # link); each attempt's folder is the owner's alone.
        run.path.parent.chmod(0o711)
        give_to(launch.run_as, run.path)
        env.update(launch.run_as.environment())
    if launch.resume_from is not None:
        previous = RunDir.of(runs_dir, launch.job_id, launch.resume_from)
        copy_checkpoints(previous.checkpoints, run.checkpoints, launch.run_as)
    return run, env


def thread_counts(cpus: float | None) -> dict[str, str]:
    """The threads a job with `cpus` cores starts by default: OpenMP's, and TensorFlow's
    within and between ops, one per core it got (a job's own `command.env` overrides them);
    none where it asked for no cores."""
    if cpus is None:
        return {}
    threads = str(max(1, math.ceil(cpus)))
    names = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
    return dict.fromkeys(names, threads)


def give_to(account: Account, folder: Path) -> None:
    """Makes `folder` (gpuq's, with only what gpuq wrote in it) and everything in it
    `account`'s alone: owner, group, no access for anyone else. The folder itself goes
    last: until then the account cannot change what is in it."""
    for path in (*sorted(folder.rglob("*"), reverse=True), folder):
        os.chown(path, account.uid, account.gid, follow_symlinks=False)
        if not path.is_symlink():
            path.chmod(0o700 if path.is_dir() else 0o600)


def copy_checkpoints(source: Path, target: Path, account: Account | None) -> None:
    """Copies an earlier attempt's checkpoints into `target`, links as links: as `account`,
    whose folder `source` is (the job's processes could have made anything of it), so the
    copy reads only what the account itself may read."""
    if account is None:  # gpuq's own folders
        if source.is_dir() and not source.is_symlink():
            shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
        return
    copied = subprocess.run(
        ["cp", "-a", "--", f"{source}/.", f"{target}/"],
        user=account.uid,
        group=account.gid,
        extra_groups=list(account.groups),
        umask=UMASK,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
        cwd="/",
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=COPY_TIMEOUT_S,
        check=False,
    )
    if copied.returncode != 0 and os.path.lexists(source):
        words = copied.stderr.strip().splitlines() or [f"cp exited {copied.returncode}"]
        raise OSError(f"could not copy the earlier attempt's checkpoints: {words[-1]}")
