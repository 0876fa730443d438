"""gpuq's start-up hook for `command` jobs, on the job's PYTHONPATH.

When the job's program imports TensorFlow (directly or through Keras), this applies the
job's device plan (memory cap per GPU, or simulated GPUs) right after the import, before
the program can run a single op. It imports nothing heavy itself.
"""

import importlib.abc
import importlib.machinery
import os
import sys
import types


class _ConfigureOnImport(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run_module = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run_module(module)
            from gpuq.contract.device_plan import ENV, DevicePlan
            from gpuq.worker.devices import configure

            configure(module, DevicePlan.from_json(os.environ[ENV]))

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("GPUQ_DEVICES"):
    sys.meta_path.insert(0, _ConfigureOnImport())
