"""What the Slurm executor checks of the machine it runs on: that Slurm's commands answer
here, and which filesystem holds the run directories the compute nodes must share."""

from pathlib import Path

from service.executors.slurm import commands
from service.executors.slurm.commands import SlurmError


def slurm_environment_ok() -> str | None:
    """None if Slurm's commands answer here; otherwise why not."""
    try:
        commands.run_command(["sinfo", "--version"])
    except SlurmError as exc:
        return str(exc)
    return None


def describe_filesystem(path: Path) -> str:
    """The filesystem under `path`, from /proc/mounts (for the start-up warning)."""
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if (
                    len(fields) >= 3
                    and str(path).startswith(fields[1])
                    and len(fields[1]) > len(best)
                ):
                    best, kind = fields[1], fields[2]
    except OSError:
        pass
    return f"{kind} mounted at {best or '?'}"
