"""The service's end of `worker.launcher`, a pre-started process that forks a runner
per job in about a millisecond (instead of a fresh interpreter's hundreds) and keeps warm
training processes ready for builtin jobs.

Warm workers (`GPUQ_WARM_WORKERS`): the launcher's `warm_pool` forks standby runners
(`worker/standby.py`). Each makes a session of its own at once and starts `python -P -m
worker.warm` as its child (a fresh interpreter: nothing that has imported TensorFlow is ever
forked), which imports TensorFlow, Keras and `worker.train` with `CUDA_VISIBLE_DEVICES=""`
(`contract.runspec.warm_environment`) and says `ready`. A builtin job's request carries
`"warm": true`; the launcher hands it to a ready standby (which answers `taken`) or, if none
is ready or its code is stale, forks a cold runner. The standby then is the job's runner
exactly as a forked one is (the owner's account, `output.log`, the runner's environment,
`runner.supervise`), and passes the job to its warm child, which takes the job's
environment, becomes the owner, and calls `train.main`: the devices and caps are applied
before TensorFlow first lists devices, as in a cold start. The pool is refilled behind every
take; a standby that dies while idle is replaced (with a backoff while they cannot start at
all), all are retired when `code_fingerprint` (the sources of `gpuq`, `service` and
`worker`, TensorFlow's folder) changes, and they end when the launcher's input ends. The
launcher reports the pool (`{"pool": [...]}`) for `/metrics`.
"""

import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuq.contract.account import Account
from gpuq.contract.processes import LAUNCHER_MODULE
from gpuq.contract.runspec import warm_environment
from service.executors.base import Standby
from service.executors.environment import inherited

log = logging.getLogger(__name__)

#: How long a spawn waits for the launcher's answer before giving up on it.
LAUNCHER_REPLY_S = 10.0
READ_CHUNK = 65536


class Launcher:
    """The service's end of `worker.launcher`; `on_exit` runs whenever a runner exits.
    It keeps `warm` standby runners ready for builtin jobs, and the start-up hook's folder
    in `hook_dir`."""

    def __init__(
        self, on_exit: Callable[[], None], warm: int = 0, hook_dir: Path | None = None
    ) -> None:
        self._on_exit = on_exit
        self.warm = warm
        self.hook_dir = hook_dir  #: where it keeps the start-up hook's folder for runners
        self._proc: subprocess.Popen[bytes] | None = None
        self._spawning = threading.Lock()  #: one request and its answer at a time
        #: the standbys the launcher reported last
        self.pool: list[Standby] = []

    def start(self) -> None:
        events, events_end = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-P",
                    "-m",
                    LAUNCHER_MODULE,
                    f"--warm={self.warm}",
                    f"--events-fd={events_end}",
                    *([f"--hook-dir={self.hook_dir}"] if self.hook_dir else []),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                pass_fds=(events_end,),
                start_new_session=True,  # a Ctrl-C meant for `gpuq serve` is not for it
                # What warm training processes import TensorFlow in: a job's, with no GPU
                # yet and no account's own variables (its owner can read it in /proc once
                # it takes a job).
                env=warm_environment(inherited(os.environ, own_account=False)),
            )
        except BaseException:
            os.close(events)
            raise
        finally:
            os.close(events_end)
        threading.Thread(target=self._follow, args=(events,), daemon=True).start()

    def _follow(self, events: int) -> None:
        """Reads what the launcher tells of meanwhile: exits, standbys, warnings."""
        with open(events, "rb") as lines:
            for line in lines:
                message = json.loads(line)
                if "exited" in message:
                    self._on_exit()
                elif "pool" in message:
                    self.pool = [Standby(s["runner"], s["worker"]) for s in message["pool"]]
                elif "warning" in message:
                    log.warning("%s", message["warning"])
        self.pool = []

    def spawn(
        self,
        run_dir: Path,
        env: Mapping[str, str],
        run_as: Account | None = None,
        *,
        warm: bool = False,
        fence: Sequence[str] = (),
    ) -> int:
        """Forks a runner for `run_dir` with environment `env`, as the account `run_as` (or
        gpuq's own), in the cgroups `fence`, or hands the job to a warm standby runner if
        `warm` (a builtin job) and one is ready; the runner's pid, or OSError."""
        request = json.dumps(
            {
                "run_dir": str(run_dir),
                "env": dict(env),
                "run_as": run_as.to_json() if run_as else None,
                "warm": warm,
                "fence": list(fence),
            }
        )
        with self._spawning:
            if self._proc is None or self._proc.poll() is not None:
                self.start()
            assert self._proc is not None and self._proc.stdin is not None
            try:
                self._proc.stdin.write(request.encode() + b"\n")
                self._proc.stdin.flush()
                answer = self._answer(self._proc)
            except OSError as exc:
                self.stop()
                raise OSError(f"the launcher did not answer: {exc}") from exc
        if "pid" not in answer:
            raise OSError(answer.get("error", "the launcher failed"))
        return int(answer["pid"])

    @staticmethod
    def _answer(proc: "subprocess.Popen[bytes]") -> dict[str, Any]:
        """The launcher's answer to the request just sent: one line on its stdout, read
        here rather than by a thread that would pass it on."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + LAUNCHER_REPLY_S
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise OSError(f"no answer within {LAUNCHER_REPLY_S:g} s")
            chunk = os.read(fd, READ_CHUNK)
            if not chunk:
                raise OSError("the launcher exited")
            line += chunk
        answer: dict[str, Any] = json.loads(line)
        return answer

    def stop(self) -> None:
        """Ends the launcher; the runners it forked carry on."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
