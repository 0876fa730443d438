"""What of gpuq's own environment a job inherits: an allow-list.

gpuq often runs as root, started from an admin's shell (`sudo -E`) or a unit with an
`EnvironmentFile`: its environment can hold tokens, cloud keys and passwords that are no
member's to read. A job gets only what says where programs and libraries are, the locale,
and the settings an admin makes for every job's CUDA, NCCL and TensorFlow; then what its
spec names (`command.env`), and gpuq's own `GPUQ_*` variables for the job.

Where gpuq itself is imported from a `PYTHONPATH` (a checkout, or a folder of wheels as
`make gpu-check` runs it) rather than installed, the processes that run gpuq's code for a
job (its runner, gpuq's trainer) get that path too (`code_path`); the job's own program
does not (`worker.launch_plan` gives it the hook's folder and the spec's `PYTHONPATH`).
"""

import os
from collections.abc import Mapping

#: inherited by name
NAMES = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "LD_LIBRARY_PATH",  # where CUDA's libraries are, on some installs
        "OMP_NUM_THREADS",
        "XLA_FLAGS",
        "SLURM_CONF",  # which cluster `sbatch` submits to (GPUQ_EXECUTOR=slurm)
        # TensorFlow's own (`TF_` alone would take Terraform's tokens too)
        "TF_FORCE_GPU_ALLOW_GROWTH",
        "TF_GPU_ALLOCATOR",
        "TF_GPU_THREAD_MODE",
        "TF_GPU_THREAD_COUNT",
        "TF_ENABLE_ONEDNN_OPTS",
        "TF_XLA_FLAGS",
        "TF_NUM_INTEROP_THREADS",
        "TF_NUM_INTRAOP_THREADS",
        "TF_DETERMINISTIC_OPS",
    }
)
#: inherited by prefix: the locale's categories; CUDA, the NVIDIA container runtime, NCCL;
#: TensorFlow's logging
PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NCCL_", "TF_CPP_")
#: who the process is: gpuq's own, where jobs run as gpuq's account (a job run as its
#: owner gets the owner's: `Account.environment`)
IDENTITY = frozenset({"HOME", "USER", "LOGNAME", "TMPDIR"})


def inherited(base: Mapping[str, str], *, own_account: bool) -> dict[str, str]:
    """What a job inherits of `base` (gpuq's environment): for a job run as gpuq's own
    account (`own_account`), or as its owner's, whose `PATH` leaves out the folders in
    gpuq's home (root's `~/.local/bin`: not the owner's programs)."""
    kept = NAMES | IDENTITY if own_account else NAMES
    env = {k: v for k, v in base.items() if k in kept or k.startswith(PREFIXES)}
    if not own_account and "PATH" in env and base.get("HOME"):
        env["PATH"] = without_folders_in(env["PATH"], base["HOME"])
    if path := code_path(base):
        env["PYTHONPATH"] = path
    return env


def code_path(base: Mapping[str, str]) -> str:
    """Where gpuq's code comes from besides its interpreter's own packages: `base`'s
    `PYTHONPATH`, each folder made absolute (gpuq's processes run in other folders); empty
    where gpuq is installed."""
    folders = (base.get("PYTHONPATH") or "").split(os.pathsep)
    return os.pathsep.join(os.path.abspath(folder) for folder in folders if folder)


def without_folders_in(path: str, home: str) -> str:
    """`path` (a `PATH`) without the folders inside `home`, or relative ones."""
    home = os.path.normpath(home)
    kept = []
    for folder in path.split(os.pathsep):
        inside = os.path.normpath(folder) == home or folder.startswith(home.rstrip("/") + "/")
        if os.path.isabs(folder) and not (inside and home != "/"):
            kept.append(folder)
    return os.pathsep.join(kept)
