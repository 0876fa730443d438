"""gpuq: share GPU machines for TensorFlow training over a REST API.

What users import comes from here:

    from gpuq import Gpuq, JobSpec, GpuqProgress, ApiError, report, replica_batches

`Gpuq` is the Python client (`gpuq.client`), `JobSpec` the job spec (`gpuq.contract.spec`),
`GpuqProgress` the Keras callback that reports progress (`gpuq.progress`), `report` one
epoch's metrics from any program (`gpuq.reporting`), `replica_batches` arrays made into
batches for MirroredStrategy's replicas that `model.fit` trains on safely (`gpuq.batches`).
They load on
first use, so a job's start (`worker.runner`, which imports `gpuq.contract`) stays cheap.
The run contract between gpuq's service and worker (`gpuq.contract`) and the caps a job's
process applies (`gpuq.caps`) live here too; the service (`service`) and the worker
(`worker`) are packages of their own beside this one: docs/ARCHITECTURE.md.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuq.batches import replica_batches
    from gpuq.client import Gpuq
    from gpuq.contract.spec import JobSpec
    from gpuq.http import ApiError
    from gpuq.progress import GpuqProgress
    from gpuq.reporting import report

_EXPORTS = {
    "Gpuq": "gpuq.client",
    "ApiError": "gpuq.http",
    "JobSpec": "gpuq.contract.spec",
    "GpuqProgress": "gpuq.progress",
    "report": "gpuq.reporting",
    "replica_batches": "gpuq.batches",
}

__all__ = ["ApiError", "Gpuq", "GpuqProgress", "JobSpec", "replica_batches", "report"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gpuq' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
