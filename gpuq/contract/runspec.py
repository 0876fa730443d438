"""What the service hands a worker: `spec.json` (the job spec plus its device plan) and the
environment its runner starts with."""

from collections.abc import Mapping

from pydantic import BaseModel, JsonValue

from gpuq.contract.device_plan import DevicePlan
from gpuq.contract.rundir import RunDir
from gpuq.contract.spec import JobSpec
from gpuq.contract.sweep import param_environment


class RunSpec(BaseModel):
    job_id: int
    attempt: int
    spec: JobSpec
    devices: DevicePlan
    #: folders the data file must really lie under (symlinks followed) as the worker opens
    #: it; None: anywhere the job can read
    data_roots: list[str] | None = None
    #: a training step (after the first) that takes longer has hung: the builtin trainer
    #: ends itself (`ExitCode.step_timeout`) rather than wait on a stuck all-reduce forever
    step_timeout_s: float | None = None
    #: a keras job on several nodes: how long an all-reduce waits for the other nodes
    collective_timeout_s: float | None = None
    #: a sweep member's parameters, given to it as `GPUQ_PARAM_<NAME>`
    params: dict[str, JsonValue] | None = None


def device_environment(base: Mapping[str, str], devices: DevicePlan) -> dict[str, str]:
    """A job's view of its GPUs: `base` (what the job inherits of the service's
    environment) minus gpuq's own settings, the GPUs numbered as NVML numbers them, and
    nothing that would lift a cap. `gpuq doctor`'s probes run in it too."""
    env = {k: v for k, v in base.items() if not k.startswith("GPUQ_")}
    env.update(
        CUDA_VISIBLE_DEVICES=",".join(str(i) for i in devices.indices),
        CUDA_DEVICE_ORDER="PCI_BUS_ID",
        PYTHONUNBUFFERED="1",
    )
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    # A crash leaves every Python thread's stack in the log (`gpuq.contract.crash_site`).
    env.setdefault("PYTHONFAULTHANDLER", "1")
    if devices.memory_limit_mb is not None:
        # The async allocator ignores TensorFlow's per-device limit: it would lift the cap.
        env.pop("TF_GPU_ALLOCATOR", None)
    return env


def warm_environment(base: Mapping[str, str]) -> dict[str, str]:
    """What a warm training process imports TensorFlow in: a job's environment with no GPU
    given yet (its job's environment replaces it before any device is touched)."""
    return device_environment(base, DevicePlan.cpu())


def runner_environment(base: Mapping[str, str], run: RunSpec, run_dir: RunDir) -> dict[str, str]:
    """The runner's environment: the job's view of its GPUs, plus its folders."""
    env = device_environment(base, run.devices)
    env.update(
        GPUQ_JOB_ID=str(run.job_id),
        GPUQ_ATTEMPT=str(run.attempt),
        GPUQ_RUN_DIR=str(run_dir.path),
        GPUQ_EVENTS=str(run_dir.events),
        GPUQ_ARTIFACTS_DIR=str(run_dir.artifacts),
        GPUQ_CHECKPOINT_DIR=str(run_dir.checkpoints),
        GPUQ_TENSORBOARD_DIR=str(run_dir.tensorboard),
    )
    env.update(param_environment(run.params or {}))
    return env
