"""Service settings, read from `GPUQ_*` environment variables.

Long because it is the one list of every setting, each with the words the settings page
shows for it (`docs/hooks/settings_reference.py`).
"""

import difflib
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.addresses import AllowList


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUQ_", extra="ignore")

    home: Path = Field(
        Path(".gpuq"),
        description="State directory: database, run directories, locks, the login socket; "
        "relative to the folder `gpuq serve` starts in.",
    )
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL of the database: SQLite in `GPUQ_HOME` when unset, "
        "`postgresql+psycopg://...` for PostgreSQL.",
    )
    gpus: str = Field(
        "auto",
        description="`auto` (NVML, else simulated GPUs with a warning), `nvml` (real GPUs or "
        "fail), `sim:N` or `sim:NxMEM` (e.g. `sim:4x16GiB`).",
    )
    host: str = Field("127.0.0.1", description="Address the API listens on.")
    port: int = Field(8000, description="Port the API listens on.")
    insecure: bool = Field(
        False,
        description="Serve with no users on a non-loopback address (`gpuq serve --insecure`): "
        "anyone who can reach it acts as an admin. Without it, no user means loopback only.",
    )
    cancel_grace_s: float = Field(30.0, ge=0, description="SIGTERM → SIGKILL grace period.")
    gpu_headroom_mb: int = Field(
        768, ge=0, description="Part of a job's memory_mb kept for CUDA context and workspaces."
    )
    over_cap: Literal["warn", "kill"] = Field(
        "kill", description="What to do when NVML shows a job over its memory_mb on a GPU."
    )
    off_gpu: Literal["warn", "kill"] = Field(
        "kill", description="What to do when NVML shows a job's process on a GPU not given to it."
    )
    sample_s: float = Field(1.0, gt=0, description="How often GPU memory is sampled (NVML).")
    drain_timeout_s: float = Field(
        30.0, gt=0, description="How long a GPU may drain before it is quarantined."
    )
    drain_slack_mb: int = Field(
        512, ge=0, description="Used memory no process accounts for that still counts as free."
    )
    retry_backoff_s: float = Field(
        10.0, ge=0, description="Wait before the first retry; doubles for each later one."
    )
    retry_backoff_max_s: float = Field(600.0, ge=0, description="Longest wait between retries.")
    fair_share_half_life_s: float = Field(
        6 * 3600.0,
        gt=0,
        description="Half-life of the GPU-seconds that order equal-priority jobs by owner.",
    )
    max_gpus_running: int | None = Field(
        None, ge=0, description="Per-user cap on GPUs held by running jobs; none if unset."
    )
    max_jobs_queued: int | None = Field(
        None, ge=1, description="Per-user cap on queued jobs; a submission past it gets 429."
    )
    max_user_priority: int = Field(
        0, description="Highest priority a non-admin may give a job; admins may go higher."
    )
    max_cpu_jobs: int = Field(2, ge=1, description="How many `gpus: 0` jobs run at once.")
    default_cpus_per_gpu: float | None = Field(
        None,
        gt=0,
        description="CPU cores a job gets per GPU when its spec names no `resources.cpus`; a "
        "job sharing a GPU (`memory_mb`) gets the part its cap is of the largest GPU (at "
        "least 0.1). Unset: such a job holds no cores and is fenced only by the box.",
    )
    default_host_memory_per_gpu_mb: int | None = Field(
        None,
        ge=16,
        description="Host memory (MiB) a job gets per GPU when its spec names no "
        "`resources.host_memory_mb`; shared GPUs as for GPUQ_DEFAULT_CPUS_PER_GPU. Unset: "
        "such a job holds none and may use the box's less GPUQ_RESERVED_HOST_MEMORY_MB.",
    )
    default_cpus: float | None = Field(
        None, gt=0, description="CPU cores a `gpus: 0` job gets when its spec names none."
    )
    default_host_memory_mb: int | None = Field(
        None,
        ge=16,
        description="Host memory (MiB) a `gpus: 0` job gets when its spec names none.",
    )
    reserved_cpus: float = Field(
        0.0,
        ge=0,
        description="Cores kept for the OS and gpuq itself: never handed to jobs.",
    )
    reserved_host_memory_mb: int = Field(
        1024,
        ge=0,
        description="Host memory (MiB) kept for the OS and gpuq itself: never handed to jobs, "
        "and no job's fence reaches into it.",
    )
    host_cpus: float | None = Field(
        None,
        gt=0,
        description="The cores this box has for gpuq (before GPUQ_RESERVED_CPUS); unset: "
        "those gpuq may run on (its CPU affinity).",
    )
    host_memory_mb: int | None = Field(
        None,
        gt=0,
        description="The host memory (MiB) this box has for gpuq (before "
        "GPUQ_RESERVED_HOST_MEMORY_MB); unset: MemTotal of /proc/meminfo.",
    )
    fences: Literal["auto", "off"] = Field(
        "auto",
        description="`auto`: every job runs in a cgroup of its own that holds it to its cores, "
        "host memory, processes and GPUs (cgroup v2 where gpuq has a delegated subtree, "
        "else the v1 controllers, else none, said at start and by `gpuq doctor`). `off`: no "
        "fences.",
    )
    fence_cgroup: str | None = Field(
        None,
        description="On cgroup v2, the cgroup folder delegated to gpuq's jobs, to make their "
        "fences in instead of gpuq's own cgroup: its processes move into `holder` inside it, "
        "gpuq stays in its own. `deploy/gpuq.service` sets it to gpuq-jobs.service's "
        "(`/sys/fs/cgroup/system.slice/gpuq-jobs.service`), so that systemd can restart gpuq "
        "while jobs run; missing or not delegated there, jobs run unfenced and gpuq says why. "
        "Unset or empty: gpuq's own delegated cgroup (a container's). Not used where the "
        "controllers are cgroup v1's.",
    )
    pids_per_cpu: int = Field(
        512,
        ge=1,
        description="A job may run this many processes and threads per core it holds "
        "(`pids.max`), or per core of the box when it holds none.",
    )
    max_sweep_jobs: int = Field(
        500,
        ge=1,
        le=100_000,
        description="The most members one sweep may make; a larger sweep gets 422 saying how "
        "many it would make.",
    )
    snapshot_max_mb: int = Field(
        100,
        gt=0,
        description="The largest snapshot of a project (`POST /v1/snapshots`, the tar's MiB) "
        "gpuq stores; a larger upload gets 413 as soon as it passes this.",
    )
    snapshot_retention_days: float = Field(
        30.0,
        gt=0,
        description="A snapshot no job has used for this long (no job queued or running names "
        "it, and none that ended this recently did) is removed, file and record.",
    )
    snapshot_quota_mb: int = Field(
        2000,
        gt=0,
        description="What one user's snapshots may hold in all (MiB; a snapshot several "
        "users uploaded counts once for each); an upload past it gets 413.",
    )
    placement: Literal["balanced", "pack", "spread"] = Field(
        "balanced",
        description="Which GPU a shared job (one with a memory cap) goes to. `balanced`: a "
        "GPU no other job computes on while one is spare, beside others only when every GPU "
        "is busy or when an idle GPU is kept whole for a queued job that needs it whole. "
        "`pack`: the fullest GPU that fits (best fit: for boxes where GPU memory is what "
        "runs out). `spread`: the emptiest GPU, even if a job waiting for a whole GPU then "
        "waits longer.",
    )
    preempt: Literal["off", "priority"] = Field(
        "off",
        description="`priority`: a queued job that cannot start may stop preemptible running "
        "jobs of lower priority, which save and go back to the queue to resume. `off`: a "
        "started job keeps its GPUs until it ends. Ignored under GPUQ_EXECUTOR=slurm (Slurm "
        "preempts there).",
    )
    preempt_min_run_s: float = Field(
        300.0,
        ge=0,
        description="A job that has run less than this (its current attempt) is not "
        "preempted: it has barely started, and stopping it would only thrash.",
    )
    preempt_max_times: int = Field(
        3,
        ge=0,
        description="A job preempted this many times is not preempted again: it may finish.",
    )
    max_reserved_gpu_hours: float = Field(
        24.0,
        ge=0,
        description="GPU-hours a user who is not an admin may hold booked at once "
        "(`gpuq reserve`): GPUs times hours of their reservations not over, from now on. "
        "0: only admins book.",
    )
    reservation_idle_release_s: float = Field(
        3600.0,
        gt=0,
        description="A reservation whose users have nothing queued, and nothing running on "
        "its GPUs, for this long while its window is open is released: its GPUs return to "
        "everyone.",
    )
    warm_workers: int = Field(
        1,
        ge=0,
        le=64,
        description="Training processes kept started ahead of need for builtin jobs "
        "(TensorFlow imported, no device touched; each holds ~0.5 GiB of host memory); "
        "0: every job starts cold.",
    )
    active_poll_s: float = Field(0.25, gt=0, description="Event tailing period while jobs run.")
    idle_poll_s: float = Field(2.0, gt=0, description="Safety-net wake-up when nothing runs.")
    log_level: str = Field(
        "INFO",
        description="The service's log level; `debug` adds libraries' lines (Alembic, uvicorn).",
    )
    run_as: Literal["service", "owner"] = Field(
        "service",
        description="Whose Unix account jobs run as: `service` (gpuq's own) or `owner` (the "
        "account bound to the job's owner; gpuq must run as root).",
    )
    allow_root_jobs: bool = Field(
        False,
        description="Let `command` jobs run as root when gpuq runs as root with "
        "GPUQ_RUN_AS=service (a single-user box, a container).",
    )
    allow_shared_account: bool = Field(
        False,
        description="Let members' jobs share gpuq's own account (GPUQ_RUN_AS=service) when "
        "more than one user exists: each member's jobs can then read and change gpuq's "
        "database, state and every other member's jobs and files. Meant for one person "
        "with several tokens; a team sets GPUQ_RUN_AS=owner.",
    )
    data_dirs: str | None = Field(
        None,
        description="Colon-separated folders a job's data paths and `workdir` must lie under "
        "when gpuq has users and runs jobs as its own account; default `$GPUQ_HOME/data`.",
    )
    socket: Path | None = Field(
        None,
        description="Unix socket for local login by peer credentials, which the CLI uses "
        "too; default `$GPUQ_HOME/gpuq.sock`, `-` for none.",
    )
    idle_util_pct: float = Field(
        5.0, ge=0, le=100, description="GPU utilisation below which a job's GPUs count as idle."
    )
    idle_after_s: float = Field(
        1800.0,
        gt=0,
        description="No training step for this long (GPUs idle) makes a job idle; it also "
        "bounds one builtin training step (at least 2 min).",
    )
    idle_grace_s: float = Field(
        600.0, ge=0, description="A job is never idle in its first this many seconds."
    )
    idle_kill_after_s: float = Field(
        0.0, ge=0, description="End an idle job (reason `idle`) after this long idle; 0: never."
    )
    webhook_timeout_s: float = Field(5.0, gt=0, description="How long one delivery may take.")
    webhook_attempts: int = Field(
        6, ge=1, description="Tries per notification before it is given up."
    )
    webhook_backoff_s: float = Field(
        2.0,
        ge=0,
        description="Wait before the first retry of a delivery; doubles after, up to 5 min.",
    )
    webhook_allow: str = Field(
        "",
        description="Internal receivers webhooks may reach, comma-separated: addresses, CIDR "
        "networks and host names (e.g. `10.1.2.0/24, hooks.lab.internal`). Others get "
        "public internet addresses only: never loopback, link-local (cloud metadata), "
        "private, CGNAT, multicast or reserved ones.",
    )
    executor: Literal["local", "slurm"] = Field(
        "local", description="What runs placed jobs: `local` (this box) or `slurm` (`sbatch`)."
    )
    slurm_partition: str | None = Field(
        None, description="Slurm partition for gpuq's jobs (`sbatch --partition`)."
    )
    slurm_account: str | None = Field(
        None, description="Slurm account charged for them (`sbatch --account`)."
    )
    slurm_python: str | None = Field(
        None, description="gpuq's interpreter on the compute nodes; default: this one."
    )
    slurm_sbatch_args: str = Field(
        "",
        description="More `sbatch` arguments for every job, shell-quoted "
        "(e.g. `--mem=32G --cpus-per-task=8`).",
    )
    collective_timeout_s: float = Field(
        600.0,
        gt=0,
        description="A keras job on several nodes fails when an all-reduce waits this long "
        "for another node (a node lost, a network cut); its spec's "
        "`resources.collective_timeout_s` overrides it.",
    )
    slurm_poll_s: float = Field(
        2.0, gt=0, description="Shortest wait between two `squeue` queries."
    )
    slurm_poll_max_s: float = Field(
        30.0, gt=0, description="Longest: the wait doubles while nothing changes."
    )

    @field_validator("home")
    @classmethod
    def _absolute_home(cls, home: Path) -> Path:
        # Workers run with their run directory as cwd: every path handed out is absolute.
        return home.expanduser().resolve()

    @field_validator("webhook_allow")
    @classmethod
    def _parsed_webhook_allow(cls, text: str) -> str:
        AllowList.parse(text)  # a typo fails at start, not at the first delivery
        return text

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'gpuq.db'}"

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    @property
    def socket_path(self) -> Path | None:
        """Where `gpuq serve` listens for local logins; None when turned off (`-`)."""
        if self.socket is None:
            return self.home / "gpuq.sock"
        return None if str(self.socket) == "-" else self.socket

    @property
    def data_roots(self) -> list[Path]:
        """The folders of `GPUQ_DATA_DIRS`, resolved (symlinks followed)."""
        given = self.data_dirs if self.data_dirs is not None else str(self.home / "data")
        return [Path(p).expanduser().resolve() for p in given.split(":") if p.strip()]


#: `GPUQ_*` variables that are not the service's settings: the client's, and those gpuq
#: gives every job (`gpuq.contract.runspec`).
OTHER_VARIABLES = frozenset(
    {
        "GPUQ_URL",
        "GPUQ_TOKEN",
        "GPUQ_MCP_SECRET",  # `gpuq mcp --http`'s: service/cli/agent/loopback.py
        "GPUQ_JOB_ID",
        "GPUQ_ATTEMPT",
        "GPUQ_RUN_DIR",
        "GPUQ_EVENTS",
        "GPUQ_ARTIFACTS_DIR",
        "GPUQ_CHECKPOINT_DIR",
        "GPUQ_TENSORBOARD_DIR",
        "GPUQ_DEVICES",
        "GPUQ_FENCE",
    }
)


def known_variables() -> frozenset[str]:
    settings = {f"GPUQ_{name.upper()}" for name in Settings.model_fields}
    return frozenset(settings | OTHER_VARIABLES)


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """Each `GPUQ_*` variable in `environ` that gpuq does not know, with the nearest known
    name (None if nothing is close): a typo would otherwise be ignored without a word."""
    known = known_variables()
    return [
        (name, next(iter(difflib.get_close_matches(name, known, n=1, cutoff=0.6)), None))
        for name in sorted(environ)
        if name.startswith("GPUQ_") and name not in known
    ]


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
