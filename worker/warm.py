"""A warm training process: TensorFlow and gpuq's trainer imported ahead of need, no device
touched, waiting for one job.

Its `standby` runner starts it (`python -m worker.warm`, a fresh interpreter: nothing
that has imported TensorFlow is ever forked) with stdin and stdout on pipes. Once
everything is imported it writes `ready` on stdout and reads one line from stdin:
`{"run_dir": ..., "env": {...}, "run_as": {...} | null, "fence": [...]}`. Then it
becomes the job's process: its fence (`fenced`), the owner's account (GPUQ_RUN_AS=owner),
the runner's environment (so `CUDA_VISIBLE_DEVICES`, `CUDA_DEVICE_ORDER` and the rest are
in place before TensorFlow first lists devices: CUDA reads them when it initialises, not
when it is imported), output to `output.log`, the run directory as working directory, and
trains exactly as `python -m worker.train RUN_DIR` would. It takes one job in its life; end of input
before a job means it is not needed.
"""

import ctypes
import json
import os
import sys
from pathlib import Path
from typing import Any

import tensorflow  # noqa: F401  # what makes a cold start slow; importing touches no device
from keras import callbacks  # noqa: F401

from gpuq.batches import replica_batches  # noqa: F401
from gpuq.contract.account import Account
from gpuq.progress import GpuqProgress  # noqa: F401
from worker import architectures, data, fenced, runner, step_watchdog, train  # noqa: F401

#: prctl(2): make a process that changed its uid debuggable by its new owner again, as
#: exec would (a cold job's process can be traced and read by its owner; so can this one)
PR_SET_DUMPABLE = 4


def main() -> int:
    os.write(1, b"ready\n")
    line = sys.stdin.buffer.readline()
    if not line:
        return 0  # retired before it got a job
    return take_job(json.loads(line))


def take_job(job: dict[str, Any]) -> int:
    """Becomes the process of the job `job` describes and trains it; its exit code."""
    _step_forward()
    fenced.enter(job.get("fence") or ())
    os.environ.clear()
    os.environ.update(job["env"])
    if job.get("run_as"):
        Account.from_json(job["run_as"]).become()
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        _keras_settings()
    run_dir = Path(job["run_dir"])
    runner.output_to_log(run_dir)  # already there: its standby runner made it
    os.chdir(run_dir)
    sys.argv = ["worker.train", str(run_dir)]
    return train.main(sys.argv)


def _step_forward() -> None:
    """Undoes the step back the warm process took while importing, if it took one
    (`standby`): every thread back at its runner's niceness, as a cold job's process
    would be."""
    niceness = os.getpriority(os.PRIO_PROCESS, os.getppid())
    if os.getpriority(os.PRIO_PROCESS, 0) == niceness:
        return
    for thread in os.listdir("/proc/self/task"):
        os.setpriority(os.PRIO_PROCESS, int(thread), niceness)


def _keras_settings() -> None:
    """Keras read `keras.json` when it was imported, as gpuq's account; a cold job of the
    owner would have read theirs (`$KERAS_HOME` or `~/.keras`, by the job's environment)."""
    import keras

    folder = os.environ.get("KERAS_HOME") or os.path.expanduser("~/.keras")
    try:
        with open(os.path.join(folder, "keras.json")) as f:
            settings = json.load(f)
    except (OSError, ValueError):
        settings = {}
    config = keras.config
    config.set_floatx(settings.get("floatx", "float32"))
    config.set_epsilon(settings.get("epsilon", 1e-7))
    config.set_image_data_format(settings.get("image_data_format", "channels_last"))


if __name__ == "__main__":
    sys.exit(main())
