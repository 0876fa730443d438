"""`run_command` and `dry_run`: what `gpuq run` takes, as one typed set of arguments, and
the job (or sweep) spec built from it by the CLI's own code, with the snapshot of the
folder that `gpuq run` would take."""

import os
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuq.http import Client
from service.cli import run_spec, units
from service.cli.snapshot_upload import with_snapshot

SweepValue = str | int | float | bool


class CommandRun(BaseModel):
    """A program to run on gpuq's GPUs, as `gpuq run` takes one."""

    model_config = ConfigDict(extra="forbid")

    program: str = Field(
        min_length=1,
        description="The program: `python`, `./train.sh`, or a path; found on the PATH of "
        "the environment gpuq mcp runs in, as in the user's shell.",
    )
    args: list[str] = Field(
        default_factory=list, max_length=4096, description="Its arguments: `train.py --lr 1e-3`."
    )
    folder: str | None = Field(
        None,
        description="The project folder to run in (absolute). Default: the folder gpuq mcp "
        "was started in. Inside a git work tree its files are snapshotted now, so edits "
        "made after submitting never reach the job.",
    )
    gpus: Annotated[int, Field(ge=0, le=64)] | None = Field(
        None, description="How many GPUs (0: the CPU only). Default 1."
    )
    gpu_ids: list[Annotated[int, Field(ge=0, le=1023)]] | None = Field(
        None, description="These GPUs by index, instead of `gpus`."
    )
    memory: str | None = Field(
        None, description="Memory cap per GPU: `8G`, `8192M`. Default: whole GPUs."
    )
    cpus: Annotated[float, Field(gt=0)] | None = Field(None, description="CPU cores it holds.")
    host_memory: str | None = Field(None, description="Host memory it may use: `32G`.")
    time_limit: str | None = Field(
        None, description="Stop it after this long: `2h30m`, `90m`, `1:30:00`."
    )
    name: str | None = Field(None, description="A label (default: the script's name).")
    priority: int | None = Field(None, description="Higher starts first (yours: 0 or below).")
    after: list[int] = Field(
        default_factory=list, description="Start only once these jobs have succeeded."
    )
    retries: Annotated[int, Field(ge=0, le=10)] | None = Field(
        None, description="Run again up to N times after a failure."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="More environment variables for the program."
    )
    preemptible: bool | None = Field(
        None, description="A more urgent job may stop it (SIGTERM) and queue it again."
    )
    reservation: str | None = Field(None, description="Run in this reservation, by name.")
    snapshot: bool | None = Field(
        None,
        description="true: snapshot the folder even outside git; false: run in the folder "
        "as it is when the job starts. Default: snapshot inside a git work tree.",
    )
    sweep: dict[str, list[SweepValue]] | None = Field(
        None,
        description='Run a sweep instead: one job per combination, e.g. {"lr": [0.001, '
        "0.0001]}; `{lr}` in args gets the value, and the program GPUQ_PARAM_LR.",
    )
    max_parallel: Annotated[int, Field(ge=1)] | None = Field(
        None, description="With `sweep`: at most N members at once."
    )
    metric: str | None = Field(None, description="With `sweep`: the metric that ranks members.")
    mode: Literal["min", "max"] = Field("min", description="With `metric`: which way is better.")
    early_stopping: bool = Field(
        False, description="With `metric`: stop members that trail the others (median rule)."
    )


def spec_of(run: CommandRun) -> dict[str, Any]:
    """The job spec (with `sweep`, the sweep spec) `run` asks for, before any snapshot;
    `ValueError` names the argument of a value it refuses."""
    folder = run.folder or os.getcwd()
    if not os.path.isabs(folder) or not os.path.isdir(folder):
        raise ValueError(f"folder: {folder!r} is not an absolute path to a folder")
    options = run_spec.RunOptions(
        gpus=run.gpus,
        gpu_ids=run.gpu_ids,
        mem_mb=_parsed("memory", units.mebibytes, run.memory),
        cpus=run.cpus,
        host_memory_mb=_parsed("host_memory", units.mebibytes, run.host_memory),
        time_s=_parsed("time_limit", units.seconds, run.time_limit),
        name=run.name,
        priority=run.priority,
        after=run.after,
        retries=run.retries,
        env=[f"{k}={v}" for k, v in run.env.items()],
        preemptible=run.preemptible,
        reservation=run.reservation,
    )
    environ = os.environ | {"PWD": folder}
    try:
        spec = run_spec.build_spec(
            "command", [run.program, *run.args], options, cwd=folder, environ=environ
        )
    except run_spec.BadOption as exc:
        raise ValueError(f"{_argument(exc.option)}: {exc}") from None
    if run.sweep:  # typed values, as given: no list written out and read back
        spec["sweep"] = {"parameters": run.sweep, "mode": run.mode}
        optional = {"max_parallel": run.max_parallel, "metric": run.metric}
        spec["sweep"] |= {k: v for k, v in optional.items() if v is not None}
        if run.early_stopping:
            spec["sweep"]["early_stopping"] = {"rule": "median"}
    return spec


def snapshotted(api: Client, spec: dict[str, Any], run: CommandRun) -> dict[str, Any]:
    """`spec` with its folder's snapshot in place of the folder, as `gpuq run` sends it."""
    return with_snapshot(api, spec, run.snapshot)


def _parsed(argument: str, parse: Any, text: str | None) -> Any:
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as exc:
        raise ValueError(f"{argument}: {exc}") from None


#: the CLI's option -> this tool's argument, to name it when the spec refuses a value
ARGUMENTS = {
    "--mem": "memory",
    "--host-mem": "host_memory",
    "--time": "time_limit",
    "--after": "after",
    "--gpu-ids": "gpu_ids",
    "--retries": "retries",
    "PROGRAM": "program",
    "the current folder": "folder",
}


def _argument(option: str) -> str:
    return ARGUMENTS.get(option, option.removeprefix("--").replace("-", "_"))
