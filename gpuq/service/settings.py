"""Service settings, read from `GPUQ_*` environment variables."""

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUQ_", extra="ignore")

    home: Path = Field(Path(".gpuq"), description="State directory: database, runs, locks.")
    database_url: str | None = Field(None, description="SQLAlchemy URL; SQLite in `home`.")
    gpus: str = Field("auto", description="`auto`, `nvml`, `sim:N` or `sim:NxMEM`.")
    host: str = "127.0.0.1"
    port: int = 8000
    cancel_grace_s: float = Field(30.0, ge=0, description="SIGTERM → SIGKILL grace period.")
    gpu_headroom_mb: int = Field(
        768, ge=0, description="Part of a job's memory_mb kept for CUDA context and workspaces."
    )
    over_cap: Literal["warn", "kill"] = Field(
        "kill", description="What to do when NVML shows a job over its memory_mb on a GPU."
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
    active_poll_s: float = Field(0.25, gt=0, description="Event tailing period while jobs run.")
    idle_poll_s: float = Field(2.0, gt=0, description="Safety-net wake-up when nothing runs.")
    log_level: str = "INFO"

    @field_validator("home")
    @classmethod
    def _absolute_home(cls, home: Path) -> Path:
        # Workers run with their run directory as cwd: every path handed out is absolute.
        return home.expanduser().resolve()

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'gpuq.db'}"

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
