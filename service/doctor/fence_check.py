"""`gpuq doctor`'s word on job fences: whether the kernel will hold each job to its cores,
host memory, processes and GPU devices here, and if not, why and what would."""

from service.doctor.report import Check
from service.executors.fences import Fences

NAME = "job fences"


def fence_check(fences: Fences) -> Check:
    """Passed where jobs get cgroups (saying in which folder, and whether GPU devices are
    fenced too or the NVML watchdog is their only backstop), skipped with the fix where
    they do not."""
    if fences.kind == "none":
        return Check.skip(
            NAME,
            f"none ({fences.why_none}); jobs run unfenced, held only by their GPU memory caps",
            "run gpuq as root on cgroup v1; on cgroup v2 under systemd, with gpuq-jobs.service "
            "(deploy/) or Delegate=yes",
        )
    held = (
        f"{fences.kind} in {fences.location}: each job held to its cores, host memory and processes"
    )
    if fences.devices_fenced:
        return Check.ok(NAME, f"{held}, and kept off the GPUs it was not given")
    return Check.ok(
        NAME,
        f"{held}; GPU devices not fenced (no device program here): the NVML watchdog "
        "catches a job on a GPU it was not given",
    )
