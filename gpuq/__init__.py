"""gpuq: share GPU machines for TensorFlow training over a REST API.

What users import comes from here:

    from gpuq import Gpuq, JobSpec, GpuqProgress, ApiError

`Gpuq` is the Python client (`gpuq.client`), `JobSpec` the job spec (`gpuq.contract.spec`),
`GpuqProgress` the Keras callback that reports progress (`gpuq.progress`). They load on
first use, so `import gpuq.worker.runner` (every job's start) stays cheap.
The service (`gpuq.service`), the worker (`gpuq.worker`) and the run contract between
them (`gpuq.contract`) are gpuq's own: docs/ARCHITECTURE.md.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuq.client import Gpuq
    from gpuq.contract.spec import JobSpec
    from gpuq.http import ApiError
    from gpuq.progress import GpuqProgress

_EXPORTS = {
    "Gpuq": "gpuq.client",
    "ApiError": "gpuq.http",
    "JobSpec": "gpuq.contract.spec",
    "GpuqProgress": "gpuq.progress",
}

__all__ = ["ApiError", "Gpuq", "GpuqProgress", "JobSpec"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gpuq' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
