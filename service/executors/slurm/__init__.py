"""Running gpuq's jobs on a Slurm cluster (`GPUQ_EXECUTOR=slurm`)."""

from service.executors.slurm.executor import SlurmExecutor, slurm_environment_ok

__all__ = ["SlurmExecutor", "slurm_environment_ok"]
