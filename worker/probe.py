"""`gpuq doctor`'s probe: a child that uses a framework on the GPUs as a job would.

Run as `python -m worker.probe MODE FRAMEWORK ...` with the environment a job gets
(`CUDA_VISIBLE_DEVICES`, `CUDA_DEVICE_ORDER`, `GPUQ_DEVICES`). It loads gpuq's start-up
hook first, as a `command` job's interpreter does, so the caps it meets are the ones jobs
meet. It speaks one JSON object per line on stdout and waits for a line on stdin between
steps, while the doctor reads NVML:

- `info FRAMEWORK`: its version, CUDA build and how many GPUs it sees.
- `alloc FRAMEWORK UNDER_MB OVER_MB`: holds UNDER_MB on the first visible GPU
  (`{"step": "allocated", "pid": ...}`), waits, then asks for OVER_MB more
  (`{"step": "over", "refused": ..., "error": ...}`), waits, and exits.
- `sim`: TensorFlow over the simulated GPUs of `GPUQ_DEVICES`, one all-reduce.
"""

import importlib
import json
import os
import runpy
import sys
from collections.abc import Callable
from typing import Any

from worker.launch_plan import HOOK

MIB = 1024 * 1024


def say_json(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def wait() -> None:
    sys.stdin.readline()


def info(name: str) -> None:
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        say_json(installed=False, error=str(exc))
        return
    try:
        cuda, gpus = _INFO[name](module)
    except Exception as exc:  # a broken install is a finding, not a crash
        say_json(installed=True, version=module.__version__, error=f"{type(exc).__name__}: {exc}")
        return
    say_json(installed=True, version=module.__version__, cuda=cuda, gpus=gpus)


def _tensorflow_info(tf: Any) -> tuple[str | None, int]:
    build = tf.sysconfig.get_build_info()
    cuda = build.get("cuda_version") if build.get("is_cuda_build") else None
    return cuda, len(tf.config.list_physical_devices("GPU"))


def _torch_info(torch: Any) -> tuple[str | None, int]:
    return torch.version.cuda, torch.cuda.device_count() if torch.version.cuda else 0


def _jax_info(jax: Any) -> tuple[str | None, int]:
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:  # no GPU backend: a CPU-only jaxlib, or no plugin
        return None, 0
    cuda = getattr(gpus[0].client, "platform_version", None) if gpus else None
    return cuda, len(gpus)


_INFO: dict[str, Callable[[Any], tuple[str | None, int]]] = {
    "tensorflow": _tensorflow_info,
    "torch": _torch_info,
    "jax": _jax_info,
}


def alloc(name: str, under_mb: int, over_mb: int) -> None:
    allocate, refused = _ALLOC[name]()
    held = allocate(under_mb)
    say_json(step="allocated", pid=os.getpid(), memory_mb=under_mb)
    wait()
    try:
        extra = allocate(over_mb)
    except Exception as exc:
        if not refused(exc):
            raise
        say_json(step="over", refused=True, error=f"{type(exc).__name__}: {str(exc)[:300]}")
    else:
        say_json(step="over", refused=False, error=None)
        del extra
    wait()
    del held


def _torch_alloc() -> tuple[Callable[[int], Any], Callable[[BaseException], bool]]:
    import torch

    def allocate(mb: int) -> Any:
        block = torch.empty(mb * MIB, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        return block

    return allocate, lambda exc: isinstance(exc, torch.OutOfMemoryError)


def _jax_alloc() -> tuple[Callable[[int], Any], Callable[[BaseException], bool]]:
    import jax.numpy as jnp

    def allocate(mb: int) -> Any:
        return jnp.ones((mb * MIB,), dtype=jnp.uint8).block_until_ready()

    return allocate, lambda exc: "RESOURCE_EXHAUSTED" in str(exc)


def _tensorflow_alloc() -> tuple[Callable[[int], Any], Callable[[BaseException], bool]]:
    import tensorflow as tf

    def allocate(mb: int) -> Any:
        with tf.device("/GPU:0"):
            block = tf.ones([mb * MIB], dtype=tf.uint8)
            _ = block.numpy()[:1]  # the allocation is real once a value comes back
            return block

    return allocate, lambda exc: isinstance(exc, tf.errors.ResourceExhaustedError)


_ALLOC = {"torch": _torch_alloc, "jax": _jax_alloc, "tensorflow": _tensorflow_alloc}


def sim() -> None:
    import tensorflow as tf

    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    strategy = tf.distribute.MirroredStrategy(devices)
    ones = strategy.run(lambda: tf.constant(1.0))
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, ones, axis=None)
    say_json(replicas=strategy.num_replicas_in_sync, devices=devices, all_reduce=float(total))


def main(argv: list[str]) -> int:
    runpy.run_path(str(HOOK))  # gpuq's start-up hook, as in a `command` job
    mode = argv[1]
    if mode == "info":
        info(argv[2])
    elif mode == "alloc":
        alloc(argv[2], int(argv[3]), int(argv[4]))
    elif mode == "sim":
        sim()
    else:
        print(f"usage: {__doc__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
