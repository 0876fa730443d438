"""Which executor runs placed jobs (`GPUQ_EXECUTOR`): the one place its kind is chosen.

The scheduler's process opens the executor (`open_executor`); an API process opens no
executor, only, where jobs go to a cluster with a queue of its own, the cluster's node
list (`open_cluster`), which admission and `GET /v1/gpus` need.
"""

import logging

from service.executors import Cluster, Executor, LocalExecutor
from service.executors.fences import open_fences
from service.executors.job_fence import FencePolicy, fence_parent
from service.executors.slurm import SlurmExecutor, SlurmNodes, slurm_environment_ok
from service.gpus.inventory import InventoryError
from service.host import host_size
from service.settings import Settings

log = logging.getLogger(__name__)


def open_executor(settings: Settings) -> Executor:
    """The executor `GPUQ_EXECUTOR` names; `InventoryError` if Slurm is asked for but its
    commands do not answer here."""
    if settings.executor == "slurm":
        _check_slurm()
        return SlurmExecutor(settings)
    socket = settings.socket_path.absolute() if settings.socket_path else None
    fences = open_fences(settings.fences, fence_parent(settings.home), settings.fence_cgroup)
    if fences.kind == "none":
        log.warning("jobs run unfenced: %s (gpuq doctor says more)", fences.why_none)
    else:
        log.info("each job in cgroups of its own (%s, in %s)", fences.kind, fences.location)
    fence = FencePolicy(fences, host_size(settings), settings.pids_per_cpu)
    return LocalExecutor(settings.runs_dir, settings.warm_workers, socket=socket, fence=fence)


def open_cluster(settings: Settings) -> Cluster | None:
    """The cluster jobs are handed to (Slurm's nodes); None where gpuq places jobs on this
    box itself."""
    if settings.executor == "slurm":
        _check_slurm()
        return SlurmNodes(settings)
    return None


def _check_slurm() -> None:
    problem = slurm_environment_ok()
    if problem is not None:
        raise InventoryError(
            f"GPUQ_EXECUTOR=slurm, but Slurm's commands do not work here ({problem}); "
            "install Slurm's client and set SLURM_CONF if needed"
        )
