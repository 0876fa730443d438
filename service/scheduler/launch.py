"""Starts a placed job: its run directory, spec.json, environment, and a detached runner."""

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping

from service.spec import JobSpec
from worker.command import launch_plan
from worker.rundir import RunDir, write_json_atomic
from worker.runspec import Devices, RunSpec


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


def launch(
    run: RunSpec, run_dir: RunDir, resume_from: RunDir | None = None
) -> subprocess.Popen[bytes]:
    """Writes the run directory (spec.json, launch.json) and starts `worker.runner` in a
    session of its own.

    A retry gets a copy of the previous attempt's checkpoints to resume from; the previous
    attempt's own files stay as they were.
    """
    run_dir.create()
    if resume_from is not None and resume_from.checkpoints.is_dir():
        shutil.copytree(resume_from.checkpoints, run_dir.checkpoints, dirs_exist_ok=True)
    write_json_atomic(run_dir.spec, run.model_dump(mode="json"))
    env = worker_env(os.environ, run, run_dir)
    write_json_atomic(run_dir.launch, launch_plan(run_dir, run, env))
    with open(run_dir.log, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "worker.runner", str(run_dir.path)],
            env=env,
            cwd=run_dir.path,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
