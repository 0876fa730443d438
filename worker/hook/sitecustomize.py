"""gpuq's start-up hook for `command` jobs, on the job's PYTHONPATH.

It applies the job's device plan (`GPUQ_DEVICES`) in whichever framework the program
uses. At start-up it sets the environment JAX and PyTorch read when they first touch a
GPU (and hides real GPUs from simulated ones). When the program imports TensorFlow, it
sets the memory cap per GPU (or the simulated GPUs) right after the import, before the
program can run a single op; when it imports PyTorch, it queues the cap for when PyTorch
initialises CUDA. It imports nothing heavy itself: the frameworks come with the program's
own imports. It imports from `gpuq` alone (`gpuq.caps`): a user's own `worker.py` or
`service.py` beside their script must never stand in for what caps their job.
"""

import importlib.machinery
import os
import sys
import types
from collections.abc import Callable

Setup = Callable[[types.ModuleType], None]


class _SetUpOnImport:
    """Runs a framework's set-up right after the program's first import of it.

    A meta path finder by its `find_spec` alone: `importlib.abc` would cost every
    interpreter start (each DataLoader worker's too) some 10 ms."""

    def __init__(self, setups: dict[str, Setup]) -> None:
        self.setups = setups

    def find_spec(
        self, name: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name not in self.setups:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run_module = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            # Armed until the import itself: libraries probe with
            # `importlib.util.find_spec("torch")` long before they import it.
            setup = self.setups.pop(name, None)
            if not self.setups and self in sys.meta_path:
                sys.meta_path.remove(self)
            run_module(module)
            if setup is not None:
                setup(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _install() -> None:
    from gpuq.caps import frameworks
    from gpuq.contract.device_plan import ENV, DevicePlan

    plan = DevicePlan.from_json(os.environ[ENV])
    for name, value in frameworks.startup_environment(plan, os.environ).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value

    # One node of several: the caps alone, as MultiWorkerMirroredStrategy must still
    # configure TensorFlow's collectives after the import.
    one_of_many = int(os.environ.get("GPUQ_NODES") or 1) > 1

    def configure_tensorflow(tf: types.ModuleType) -> None:
        from gpuq.caps.devices import configure

        configure(tf, plan, one_worker_of_many=one_of_many)

    setups: dict[str, Setup] = {"tensorflow": configure_tensorflow}
    if frameworks.job_cap_mb(plan) is not None:
        setups["torch"] = lambda torch: frameworks.cap_torch(torch, plan)
    sys.meta_path.insert(0, _SetUpOnImport(setups))


if os.environ.get("GPUQ_DEVICES"):
    _install()
