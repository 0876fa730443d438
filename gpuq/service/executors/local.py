"""`LocalExecutor`: runs jobs on this box, each in a session of its own under a runner.

Runners are forked by the pre-started launcher; if it cannot answer, a fresh
`python -m gpuq.worker.runner` starts instead. A runner leads its job's process group and
writes `exit.json` when the job ends, so a job outlives `gpuq serve` and is taken back
(pid and start time must match) when the service starts again.
"""

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuq.contract.processes import process_start_ticks
from gpuq.contract.rundir import RunDir, read_json, write_json_atomic
from gpuq.contract.runspec import RunSpec, runner_environment
from gpuq.service.executors.base import Exit, Launch, LaunchError, Started
from gpuq.service.executors.launcher import Launcher

log = logging.getLogger(__name__)


@dataclass
class _Runner:
    """A job's runner, which leads the job's process group."""

    job_id: int
    run: RunDir
    pid: int
    start_ticks: int | None = None
    proc: subprocess.Popen[bytes] | None = None  #: set when started without the launcher

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        ticks = process_start_ticks(self.pid) if self.pid > 0 else None
        return ticks is not None and self.start_ticks in (None, ticks)

    def signal(self, sig: signal.Signals) -> None:
        if self.pid > 0:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)


class LocalExecutor:
    name = "local"

    def __init__(self, runs_dir: Path) -> None:
        self.runs_dir = runs_dir
        self._on_exit: Callable[[], None] = lambda: None
        # Started by `open`, or by the first spawn where nobody opened the executor.
        self._launcher = Launcher(lambda: self._on_exit())
        self._runners: dict[int, _Runner] = {}

    def open(self, on_exit: Callable[[], None]) -> None:
        self._on_exit = on_exit
        self._launcher.start()

    def close(self) -> None:
        self._launcher.stop()

    def run_dir(self, job_id: int, attempt: int) -> RunDir:
        return RunDir.of(self.runs_dir, job_id, attempt)

    def start(self, launch: Launch) -> Started:
        run = self.run_dir(launch.job_id, launch.attempt)
        runspec = RunSpec(
            job_id=launch.job_id, attempt=launch.attempt, spec=launch.spec, devices=launch.devices
        )
        try:
            env = self._prepare(run, runspec, launch.resume_from)
            runner = self._spawn(launch.job_id, run, env)
        except OSError as exc:
            raise LaunchError(f"could not start the worker: {exc}") from exc
        runner.start_ticks = process_start_ticks(runner.pid)
        self._runners[launch.job_id] = runner
        return Started(runner.pid)

    def _prepare(self, run: RunDir, runspec: RunSpec, resume_from: int | None) -> dict[str, str]:
        """Writes the run directory; a retry gets a copy of the previous attempt's
        checkpoints to resume from (that attempt's own files stay as they were)."""
        run.create()
        if resume_from is not None:
            previous = self.run_dir(runspec.job_id, resume_from)
            if previous.checkpoints.is_dir():
                shutil.copytree(previous.checkpoints, run.checkpoints, dirs_exist_ok=True)
        # Not durable: after a power cut the attempt is over whatever this file says.
        write_json_atomic(run.spec, runspec.model_dump(mode="json"), durable=False)
        return runner_environment(os.environ, runspec, run)

    def _spawn(self, job_id: int, run: RunDir, env: dict[str, str]) -> _Runner:
        try:
            return _Runner(job_id, run, self._launcher.spawn(run.path, env))
        except OSError as exc:
            log.warning("job %d: %s; starting its runner directly", job_id, exc)
        with open(run.log, "ab") as output:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gpuq.worker.runner", str(run.path)],
                env=env,
                cwd=run.path,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        threading.Thread(target=self._await_exit, args=(proc,), daemon=True).start()
        return _Runner(job_id, run, proc.pid, proc=proc)

    def _await_exit(self, proc: subprocess.Popen[bytes]) -> None:
        proc.wait()
        self._on_exit()

    def adopt(self, job_id: int, attempt: int, runner_pid: int | None) -> bool:
        run = self.run_dir(job_id, attempt)
        info = read_json(run.runner) or {}
        pid = int(info.get("runner_pid") or runner_pid or 0)
        runner = _Runner(job_id, run, pid, info.get("runner_start_ticks"))
        self._runners[job_id] = runner
        return runner.alive()

    def exited(self) -> list[Exit]:
        ended = []
        for runner in list(self._runners.values()):
            if runner.alive():
                continue
            # Whatever the job left behind in its process group goes now.
            runner.signal(signal.SIGKILL)
            del self._runners[runner.job_id]
            ended.append(Exit(runner.job_id, read_json(runner.run.exit)))
        return ended

    def signal(self, job_id: int, sig: signal.Signals) -> None:
        runner = self._runners.get(job_id)
        if runner is not None:
            runner.signal(sig)

    def process_groups(self) -> dict[int, int]:
        return {r.pid: r.job_id for r in list(self._runners.values()) if r.pid > 0}
