"""Slurm's commands as gpuq calls them: argument lists in, parsed records out.

Machine-readable forms only (`sbatch --parsable`, `squeue`/`sinfo` with a `|`-separated
format, `sacct --parsable2`): free text is never parsed. Every call has a timeout, so a
stuck controller slows gpuq's loop but never hangs it.
"""

import math
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuq.contract.account import Account
from gpuq.contract.slurm_options import SlurmOptions
from gpuq.contract.spec import JobSpec
from service.executors.base import Node

TIMEOUT_S = 30.0
SEPARATOR = "|"


class SlurmError(OSError):
    """A Slurm command failed; the message has its own words."""


def run_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """Runs a Slurm command and returns its standard output; `SlurmError` on failure."""
    try:
        done = subprocess.run(
            list(argv),
            env=dict(env) if env is not None else None,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"{argv[0]}: {exc}") from exc
    if done.returncode != 0:
        words = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise SlurmError(f"{argv[0]} exited {done.returncode}: {words[-1] if words else ''}")
    return done.stdout


def time_minutes(time_limit_s: float, grace_s: float) -> int:
    """Slurm's `--time` (whole minutes) for a job gpuq stops at `time_limit_s`: the limit
    plus the cancel grace and a minute's margin, so gpuq's own stop (SIGTERM, then SIGKILL)
    comes first and Slurm's limit is the backstop."""
    return math.ceil((time_limit_s + grace_s) / 60) + 1


def sbatch_argv(
    *,
    job_id: int,
    script: str,
    output: str,
    workdir: str,
    spec: JobSpec,
    where: SlurmOptions,
    grace_s: float,
    priority_nice: int,
    held: bool,
    after: Sequence[str],
    extra: str,
    run_as: Account | None = None,
    cpus: float | None = None,
    host_memory_mb: int | None = None,
    reservation: str | None = None,
) -> list[str]:
    """`sbatch --parsable ...` for one attempt of a gpuq job; `run_as`: submitted by root
    for that account (GPUQ_RUN_AS=owner), so Slurm runs and accounts the job as its owner.
    `cpus` and `host_memory_mb`: what the job got, per node, which Slurm's own cgroups
    hold it to there."""
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name=gpuq-{job_id}",
        f"--output={output}",
        "--open-mode=append",
        f"--chdir={workdir}",
        "--export=ALL",  # the runner's environment, as sbatch is given it
        # gpuq decides what runs again, as a new attempt in a run directory of its own.
        "--no-requeue",
        f"--nice={priority_nice}",
    ]
    if spec.resources.nodes > 1:
        # One gpuq worker per node (`srun` in the batch step starts them), each with the
        # node's `--gres` GPUs.
        argv.extend([f"--nodes={spec.resources.nodes}", "--ntasks-per-node=1"])
    gpus = spec.resources.gpu_count
    if gpus:
        argv.append(f"--gres=gpu:{gpus}")  # per node
    if spec.time_limit_s:
        argv.append(f"--time={time_minutes(spec.time_limit_s, grace_s)}")
        # If gpuq is down when the limit passes, Slurm's own SIGTERM reaches the runner
        # (`B:`), which passes it to training so it can checkpoint, `grace_s` before the end.
        argv.append(f"--signal=B:TERM@{max(1, math.ceil(grace_s))}")
    # Partition, account, QOS, constraint: whichever are set.
    argv.extend(f"--{key}={value}" for key, value in where.model_dump(exclude_none=True).items())
    if run_as is not None:
        argv.extend([f"--uid={run_as.uid}", f"--gid={run_as.gid}"])
    argv += ["--hold"] if held else []
    argv += ["--dependency=afterok:" + ":".join(after)] if after else []
    argv += [f"--reservation={reservation}"] if reservation else []  # gpuq's, in Slurm
    argv.extend(shlex.split(extra))
    # After the site's extras: the job's own figures win over a site-wide `--mem` (sbatch
    # takes an option's last value).
    argv.extend(_host_options(cpus, host_memory_mb))
    argv.append(script)
    return argv


def _host_options(cpus: float | None, host_memory_mb: int | None) -> list[str]:
    """The cores (whole ones: Slurm counts no fractions) and host memory of each node: one
    task per node, so a task's cores are the node's."""
    options = []
    if cpus is not None:
        options.append(f"--cpus-per-task={math.ceil(cpus)}")
    if host_memory_mb is not None:
        options.append(f"--mem={host_memory_mb}M")
    return options


def parse_sbatch(output: str) -> str:
    """`--parsable` prints `jobid` or `jobid;cluster`."""
    first = output.strip().splitlines()[0] if output.strip() else ""
    slurm_id = first.split(";")[0].strip()
    if not slurm_id.isdigit():
        raise SlurmError(f"sbatch --parsable printed {output.strip()!r}, not a job id")
    return slurm_id


@dataclass(frozen=True)
class QueueRow:
    slurm_id: str
    state: str  #: Slurm's long state name (`PENDING`, `RUNNING`, `CANCELLED by 0`...)
    reason: str  #: why a pending job waits (`Resources`, `Priority`, `JobHeldUser`...)
    nodes: str


#: job id, long state, reason, node list; pending jobs in Slurm's own order
SQUEUE_FORMAT = SEPARATOR.join(["%i", "%T", "%r", "%N"])


def squeue_argv(names: Sequence[str]) -> list[str]:
    """One query for all of gpuq's jobs (`--states=all` keeps the ones Slurm ended
    recently, so their final state is known without accounting)."""
    return [
        "squeue",
        "--noheader",
        "--states=all",
        f"--name={','.join(names)}",
        f"--format={SQUEUE_FORMAT}",
        "--sort=-p,i",
    ]


def parse_squeue(output: str) -> list[QueueRow]:
    rows = []
    for line in output.splitlines():
        fields = line.strip().split(SEPARATOR)
        if len(fields) == 4 and fields[0].strip().isdigit():
            rows.append(QueueRow(*(f.strip() for f in fields)))
    return rows


def sacct_argv(slurm_ids: Sequence[str]) -> list[str]:
    """The final states of jobs the controller has forgotten (accounting only)."""
    return [
        "sacct",
        "--noheader",
        "--parsable2",
        "--allocations",
        f"--jobs={','.join(slurm_ids)}",
        "--format=JobID,State",
    ]


def parse_sacct(output: str) -> dict[str, str]:
    states = {}
    for line in output.splitlines():
        fields = line.strip().split(SEPARATOR)
        if len(fields) == 2 and fields[0].isdigit():
            states[fields[0]] = fields[1]
    return states


SINFO_FORMAT = "NodeList:|,Gres:|,GresUsed:|,StateLong:"


def sinfo_argv(partition: str | None) -> list[str]:
    argv = ["sinfo", "--noheader", "--Node", f"--Format={SINFO_FORMAT}"]
    if partition:
        argv.append(f"--partition={partition}")
    return argv


def gpu_count(gres: str) -> int:
    """GPUs in a GRES string: `gpu:4`, `gpu:a100:4(S:0-1)`, `gpu:tesla:2,mps:100` → 4, 4, 2;
    `(null)` → 0."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def _takes_no_jobs(state: str) -> bool:
    """A node state in which no job starts there (`down*`, `drained`, `maint`...)."""
    return any(word in state.lower() for word in ("down", "drain", "fail", "maint", "reserved"))


def parse_sinfo(output: str) -> list[Node]:
    nodes: dict[str, Node] = {}
    for line in output.splitlines():
        fields = [f.strip() for f in line.split(SEPARATOR)]
        if len(fields) < 4 or not fields[0]:
            continue
        gpus, allocated, state = gpu_count(fields[1]), gpu_count(fields[2]), fields[3]
        free = 0 if _takes_no_jobs(state) else max(0, gpus - allocated)
        # A node in several partitions is listed once per partition.
        nodes[fields[0]] = Node(fields[0], gpus, allocated, free, state)
    return list(nodes.values())
