"""`LocalExecutor`: runs jobs on this box, each in a session of its own under a runner.

Runners are forked by the pre-started launcher, which also keeps `warm_workers` standby
runners whose training processes have imported TensorFlow already: a builtin job takes one
when it is ready. If the launcher cannot answer, a fresh `python -m worker.runner`
starts instead. A runner leads its job's process group and
writes `exit.json` when the job ends, so a job outlives `gpuq serve` and is taken back
when the service starts again.

gpuq signals a job's processes as root, so it signals only a runner it knows
(`is_runner_of`): the pid gpuq recorded, leading a session of its own in the attempt's
folder, which only gpuq and the job's owner can enter. A pid the job wrote in its own files
(`runner.json`) is never believed: with no record of gpuq's own, the runner is looked for
(`find_runner`).
"""

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuq.contract import job_files
from gpuq.contract.account import UMASK, Account
from gpuq.contract.processes import RUNNER_MODULE, process_start_ticks, session_and_descendants
from gpuq.contract.rundir import HOOK_FOLDER, RunDir, read_json
from service.executors.base import Exit, Launch, LaunchError, QueueingExecutor, Standby, Started
from service.executors.fences import Fences, open_fences
from service.executors.job_fence import FencePolicy, fence_name, out_of_memory
from service.executors.launcher import Launcher
from service.executors.prepare import prepare_run

log = logging.getLogger(__name__)


@dataclass
class _Runner:
    """A job's runner, which leads the job's process group."""

    job_id: int
    run: RunDir
    pid: int
    #: when the runner started: from the launcher for one this service started, read as
    #: it was taken back for one `adopted`
    start_ticks: int | None = None
    proc: subprocess.Popen[bytes] | None = None  #: set when started without the launcher
    #: an interactive session: a shell puts each of its jobs in a process group of its
    #: own, so the whole session (and what the runner adopted) is signalled
    session: bool = False
    #: taken back after a restart: no child of this service's, so perhaps nobody reaps it
    #: when it ends (a zombie keeps its pid and start time, but no folder)
    adopted: bool = False
    #: the host memory it was given (None: none asked, or not known after a restart)
    host_memory_mb: int | None = None
    fence: str = ""  #: its fence's name (`job_fence.fence_name`)

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        if self.start_ticks is not None and process_start_ticks(self.pid) != self.start_ticks:
            return False  # ended, or another process took its pid since
        if self.start_ticks is not None and not self.adopted:
            return True  # the launcher's child, which it reaps
        return is_runner_of(self.pid, self.run)

    def signal(self, sig: signal.Signals) -> None:
        """Signals the job's process group: while its runner lives, or once no process has
        the runner's pid (what the job left behind in its group); never a process that
        took the pid since."""
        if self.pid <= 0:
            return
        if self.alive() or process_start_ticks(self.pid) is None:
            if self.session:
                for pid in session_and_descendants(self.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)


def is_runner_of(pid: int, run: RunDir) -> bool:
    """Whether process `pid` is the runner of attempt `run`: it leads a session of its own
    and works in the attempt's folder (the same folder, not one of the same name)."""
    if pid <= 0:
        return False
    try:
        here = os.stat(f"/proc/{pid}/cwd")
        folder = os.lstat(run.path)
        return os.getsid(pid) == pid and (here.st_dev, here.st_ino) == (
            folder.st_dev,
            folder.st_ino,
        )
    except OSError:
        return False


def find_runner(run: RunDir) -> int:
    """The pid of the process that `is_runner_of` attempt `run`, or 0 if none is."""
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit() and is_runner_of(int(entry.name), run):
                return int(entry.name)
    return 0


class LocalExecutor:
    name = "local"

    def __init__(
        self,
        runs_dir: Path,
        warm_workers: int = 0,
        socket: Path | None = None,
        fence: FencePolicy | None = None,
    ) -> None:
        self.runs_dir = runs_dir
        #: every job's cgroups, and how big (none: `GPUQ_FENCES=off`, or gpuq cannot)
        self.fence = fence
        self.fences: Fences = fence.fences if fence is not None else open_fences("off")
        #: gpuq's local socket, named to every job (`GPUQ_SOCKET`): `gpuq` inside a job or
        #: a session reaches this gpuq, as the job's owner
        self.socket = socket
        self._on_exit: Callable[[], None] = lambda: None
        # Started by `open`, or by the first spawn where nobody opened the executor.
        self._launcher = Launcher(lambda: self._on_exit(), warm_workers, runs_dir / HOOK_FOLDER)
        self._runners: dict[int, _Runner] = {}

    def open(self, on_exit: Callable[[], None]) -> None:
        self._on_exit = on_exit
        self._launcher.start()

    def close(self) -> None:
        self._launcher.stop()
        self.fences.close()

    def own_queue(self) -> QueueingExecutor | None:
        return None  # gpuq places jobs on this box itself

    def run_dir(self, job_id: int, attempt: int) -> RunDir:
        return RunDir.of(self.runs_dir, job_id, attempt)

    def start(self, launch: Launch) -> Started:
        try:
            run, env = prepare_run(self.runs_dir, launch)
            if self.socket is not None:
                env["GPUQ_SOCKET"] = str(self.socket)
            fence = fence_name(launch.job_id, launch.attempt)
            folders = self._make_fence(fence, launch)
            if folders:
                env["GPUQ_FENCE"] = ":".join(folders)
            warm = launch.spec.command is None  # gpuq's own trainer: a warm one will do
            runner = self._spawn(launch.job_id, run, env, launch.run_as, warm, folders)
        except OSError as exc:
            self.fences.remove(fence)
            raise LaunchError(f"could not start the worker: {exc}") from exc
        runner.start_ticks = process_start_ticks(runner.pid)
        runner.host_memory_mb = launch.host_memory_mb
        runner.fence = fence
        runner.session = launch.spec.kind == "session"
        self._runners[launch.job_id] = runner
        return Started(str(runner.pid), runner.pid)

    def _make_fence(self, name: str, launch: Launch) -> tuple[str, ...]:
        """Makes the job's cgroups (`fences`) under `name`; the folders its runner enters,
        none where this box has no fences; OSError if the kernel refuses."""
        if self.fence is None:
            return ()
        return self.fences.make(name, self.fence.limits(launch))

    def _spawn(
        self,
        job_id: int,
        run: RunDir,
        env: dict[str, str],
        run_as: Account | None,
        warm: bool,
        fence: tuple[str, ...],
    ) -> _Runner:
        try:
            pid = self._launcher.spawn(run.path, env, run_as, warm=warm, fence=fence)
            return _Runner(job_id, run, pid)
        except OSError as exc:
            log.warning("job %d: %s; starting its runner directly", job_id, exc)
        who: dict[str, Any] = {}
        if run_as is not None:
            who = {"user": run_as.uid, "group": run_as.gid, "extra_groups": list(run_as.groups)}
            who["umask"] = UMASK
        with job_files.open_file(run.path, run.log.name, append=True) as output:  # the job's
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", RUNNER_MODULE, str(run.path)],
                env=env,
                cwd=run.path,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **who,
            )
        # The runner waits to be inside before it starts the job (`worker.fenced`).
        for folder in fence:
            Path(folder, "cgroup.procs").write_text(str(proc.pid))
        threading.Thread(target=self._await_exit, args=(proc,), daemon=True).start()
        return _Runner(job_id, run, proc.pid, proc=proc)

    def _await_exit(self, proc: subprocess.Popen[bytes]) -> None:
        proc.wait()
        self._on_exit()

    def adopt(
        self, job_id: int, attempt: int, executor_job_id: str | None, *, session: bool = True
    ) -> bool:
        """Takes back the runner gpuq recorded (`executor_job_id`: its pid). With no record
        (gpuq stopped between a launch and its record), the runner is looked for by what
        gpuq knows of it, a process leading a session of its own in the attempt's folder,
        never by a pid the job could have written (`runner.json`)."""
        run = self.run_dir(job_id, attempt)
        pid = _pid(executor_job_id) or self._found_runner(job_id, attempt, run)
        runner = _Runner(job_id, run, pid, session=session, adopted=True)
        runner.fence = fence_name(job_id, attempt)
        if is_runner_of(pid, run):
            # From now on it is this process: one that takes its pid later is not.
            runner.start_ticks = process_start_ticks(pid)
        self._runners[job_id] = runner
        return runner.alive()

    def exited(self) -> list[Exit]:
        ended = []
        for runner in list(self._runners.values()):
            if runner.alive():
                continue
            # Whatever the job left behind goes now: its process group, and anything in
            # its fence that left the group (a double fork, a new session).
            runner.signal(signal.SIGKILL)
            self.fences.kill(runner.fence)
            usage = self.fences.usage(runner.fence)
            self.fences.remove(runner.fence)  # else, once its last process is gone
            del self._runners[runner.job_id]
            verdict = out_of_memory(usage, runner.host_memory_mb)
            ended.append(Exit(runner.job_id, read_json(runner.run.exit), verdict, usage))
        self._clear_strays()
        return ended

    def _clear_strays(self) -> None:
        """Ends and removes the fences no job of this gpuq holds: one left by a start gpuq
        never recorded (it stopped in between, and the job was queued again), or one that
        still held a dying process when its job ended."""
        held = {r.fence for r in self._runners.values()}
        for name in self.fences.names():
            if name not in held:
                self.fences.kill(name)
                self.fences.remove(name)

    def signal(self, job_id: int, sig: signal.Signals) -> None:
        runner = self._runners.get(job_id)
        if runner is not None:
            runner.signal(sig)
            if sig == signal.SIGKILL:  # the end: escapees from its group included
                self.fences.kill(runner.fence)

    def standbys(self) -> list[Standby]:
        """The runners started ahead of need with a warm training process, as the
        launcher last reported them."""
        return list(self._launcher.pool)

    def job_sessions(self) -> dict[int, int]:
        return {r.pid: r.job_id for r in list(self._runners.values()) if r.pid > 0}

    def _found_runner(self, job_id: int, attempt: int, run: RunDir) -> int:
        """The runner of attempt `attempt` with no record of its pid: among its fence's
        processes first, else anywhere (`find_runner`)."""
        for pid in self.fences.members(fence_name(job_id, attempt)):
            if is_runner_of(pid, run):
                return pid
        return find_runner(run)


def _pid(value: object) -> int:
    """A pid from a record; 0 for anything that is not one."""
    try:
        pid = int(str(value))
    except ValueError:
        return 0
    return pid if pid > 0 else 0
