"""Starts a placed job: its run directory, spec.json, environment, and a detached runner.

Runners come from `worker.launcher`, a pre-started process that forks one in about a
millisecond; if it cannot, a fresh `python -m worker.runner` starts instead.
"""

import json
import logging
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from service.spec import JobSpec
from worker.command import launch_plan
from worker.rundir import RunDir, write_json_atomic
from worker.runspec import Devices, RunSpec

log = logging.getLogger(__name__)
#: How long a launch waits for the launcher's answer before starting the runner itself.
LAUNCHER_REPLY_S = 10.0


def devices_for(
    spec: JobSpec, indices: list[int], *, simulated: bool, headroom_mb: int, gpu_total_mb: int
) -> Devices:
    """The device plan a worker applies: mode, count and TensorFlow's cap per logical GPU.

    `gpu_total_mb` is the smallest assigned GPU's memory, which bounds a whole-GPU job that
    splits its GPUs into `replicas_per_gpu` logical ones.
    """
    res = spec.resources
    if not indices:
        return Devices(mode="cpu", count=0, indices=[])
    limit = None
    if not res.memory_growth:
        if res.memory_mb is not None:
            limit = res.memory_mb - headroom_mb
        elif res.replicas_per_gpu > 1:
            limit = gpu_total_mb - headroom_mb
    if limit is not None:
        limit //= res.replicas_per_gpu
    return Devices(
        mode="sim" if simulated else "gpu",
        count=len(indices),
        indices=indices,
        memory_limit_mb=limit,
        memory_growth=res.memory_growth,
        replicas_per_gpu=res.replicas_per_gpu,
    )


def worker_env(base: Mapping[str, str], run: RunSpec, run_dir: RunDir) -> dict[str, str]:
    """The runner's environment: the service's, minus gpuq's own settings, plus the GPUs."""
    env = {k: v for k, v in base.items() if not k.startswith("GPUQ_")}
    env.update(
        CUDA_VISIBLE_DEVICES=",".join(str(i) for i in run.devices.indices),
        CUDA_DEVICE_ORDER="PCI_BUS_ID",
        GPUQ_JOB_ID=str(run.job_id),
        GPUQ_ATTEMPT=str(run.attempt),
        GPUQ_RUN_DIR=str(run_dir.path),
        GPUQ_EVENTS=str(run_dir.events),
        GPUQ_ARTIFACTS_DIR=str(run_dir.artifacts),
        GPUQ_CHECKPOINT_DIR=str(run_dir.checkpoints),
        GPUQ_TENSORBOARD_DIR=str(run_dir.tensorboard),
        PYTHONUNBUFFERED="1",
    )
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    if run.devices.memory_limit_mb is not None:
        # The async allocator ignores TensorFlow's per-device limit: it would lift the cap.
        env.pop("TF_GPU_ALLOCATOR", None)
    return env


@dataclass
class Started:
    pid: int  #: the runner's, which leads the job's process group
    proc: subprocess.Popen[bytes] | None = None  #: set when not forked by the launcher


class Launcher:
    """The scheduler's end of `worker.launcher`; `on_exit` runs whenever a runner exits."""

    def __init__(self, on_exit: Callable[[], None]) -> None:
        self._on_exit = on_exit
        self._proc: subprocess.Popen[bytes] | None = None
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()

    def start(self) -> None:
        self._replies = queue.Queue()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "worker.launcher"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C meant for `gpuq serve` is not for it
        )
        assert self._proc.stdout is not None
        threading.Thread(
            target=self._read, args=(self._proc.stdout, self._replies), daemon=True
        ).start()

    def _read(self, stdout: IO[bytes], replies: "queue.Queue[dict[str, Any]]") -> None:
        for line in stdout:
            message = json.loads(line)
            if "exited" in message:
                self._on_exit()
            else:
                replies.put(message)
        replies.put({"error": "the launcher exited"})

    def spawn(self, run_dir: Path, env: Mapping[str, str]) -> int:
        """Forks a runner for `run_dir` with environment `env`; its pid, or OSError."""
        if self._proc is None or self._proc.poll() is not None:
            self.start()
        assert self._proc is not None and self._proc.stdin is not None
        request = json.dumps({"run_dir": str(run_dir), "env": dict(env)})
        try:
            self._proc.stdin.write(request.encode() + b"\n")
            self._proc.stdin.flush()
            answer = self._replies.get(timeout=LAUNCHER_REPLY_S)
        except (OSError, queue.Empty) as exc:
            self.stop()
            raise OSError(f"the launcher did not answer: {exc!r}") from exc
        if "pid" not in answer:
            raise OSError(answer.get("error", "the launcher failed"))
        return int(answer["pid"])

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


def launch(
    run: RunSpec,
    run_dir: RunDir,
    resume_from: RunDir | None = None,
    launcher: Launcher | None = None,
) -> Started:
    """Writes the run directory (spec.json, launch.json) and starts its runner in a
    session of its own: forked by `launcher`, or as a fresh process if that fails.

    A retry gets a copy of the previous attempt's checkpoints to resume from; the previous
    attempt's own files stay as they were.
    """
    run_dir.create()
    if resume_from is not None and resume_from.checkpoints.is_dir():
        shutil.copytree(resume_from.checkpoints, run_dir.checkpoints, dirs_exist_ok=True)
    # Not durable: after a power cut the attempt is over whatever these files say.
    write_json_atomic(run_dir.spec, run.model_dump(mode="json"), durable=False)
    env = worker_env(os.environ, run, run_dir)
    write_json_atomic(run_dir.launch, launch_plan(run_dir, run, env), durable=False)
    if launcher is not None:
        try:
            return Started(launcher.spawn(run_dir.path, env))
        except OSError as exc:
            log.warning("job %d: %s; starting its runner directly", run.job_id, exc)
    with open(run_dir.log, "ab") as output:
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker.runner", str(run_dir.path)],
            env=env,
            cwd=run_dir.path,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Started(proc.pid, proc)
