"""`gpuq rerun ID`: a job again, the same spec (so the same snapshot: the same code, data and
settings), with what the options change."""

from typing import Annotated, Any

import typer

from service.cli.jobs import preview_text
from service.cli.options import JsonFlag, api_client, print_json
from service.cli.run_options import Cpus, DryRun, Gpus, HostMem, Mem, Name, Priority, TimeLimit

SweepToRerun = Annotated[
    int | None,
    typer.Option(
        "--sweep", metavar="ID", help="Run sweep ID's failed and early-stopped members again."
    ),
]
JobToRerun = Annotated[
    int | None, typer.Argument(metavar="[ID]", help="The job's id.", show_default=False)
]


def rerun(
    ctx: typer.Context,
    job_id: JobToRerun = None,
    sweep: SweepToRerun = None,
    gpus: Gpus = None,
    mem: Mem = None,
    cpus: Cpus = None,
    host_mem: HostMem = None,
    time_limit: TimeLimit = None,
    name: Name = None,
    priority: Priority = None,
    dry_run: DryRun = False,
    as_json: JsonFlag = False,
) -> None:
    """Run a job again: the same program, snapshot (the code it ran), data and settings; the
    options change them (`gpuq rerun 12 --gpus 2`). It waits for no other job. With
    --sweep ID, each point of a sweep whose latest member failed or was stopped early runs
    again, in the sweep."""
    if sweep is not None:
        rerun_sweep(ctx, sweep, job_id, as_json=as_json, changing=[gpus, mem, cpus, host_mem,
                    time_limit, name, priority, dry_run or None])  # fmt: skip
        return
    if job_id is None:
        raise typer.BadParameter("name the job to run again: gpuq rerun 12", param_hint="ID")
    changes = changed(
        gpus=gpus, mem=mem, cpus=cpus, host_mem=host_mem, time_limit=time_limit, name=name,
        priority=priority,
    )  # fmt: skip
    params = {"dry_run": "true"} if dry_run else {}
    path = f"/v1/jobs/{job_id}/rerun"
    answer = api_client(ctx).json("POST", path, json=changes, params=params)
    if as_json:
        print_json(answer)
    elif dry_run:
        print(preview_text(answer))
    else:
        print(f"submitted job {answer['id']} ({answer['name']}), job {job_id} again: "
              f"{answer['status']}")  # fmt: skip


def rerun_sweep(
    ctx: typer.Context, sweep_id: int, job_id: int | None, *, as_json: bool, changing: list[Any]
) -> None:
    """`gpuq rerun --sweep ID`: its members run again as they were (no option changes them)."""
    if job_id is not None or any(value is not None for value in changing):
        raise typer.BadParameter(
            "a sweep's members run again as they were: give --sweep ID alone (and --json)",
            param_hint="'--sweep'",
        )
    sweep = api_client(ctx).json("POST", f"/v1/sweeps/{sweep_id}/rerun")
    if as_json:
        print_json(sweep)
    else:
        print(f"sweep {sweep['id']} ({sweep['name']}): its failed and early-stopped members "
              f"queued again; `gpuq sweep show {sweep['id']}` ranks them")  # fmt: skip


def changed(**given: Any) -> dict[str, Any]:
    """The spec's changes the options ask for. A number of GPUs replaces named ones."""
    resources: dict[str, Any] = {}
    if given["gpus"] is not None:
        resources |= {"gpus": given["gpus"], "gpu_ids": None}
    for option, field in (("mem", "memory_mb"), ("cpus", "cpus"), ("host_mem", "host_memory_mb")):
        if given[option] is not None:
            resources[field] = given[option]
    changes: dict[str, Any] = {"resources": resources} if resources else {}
    for option, field in (
        ("time_limit", "time_limit_s"),
        ("name", "name"),
        ("priority", "priority"),
    ):
        if given[option] is not None:
            changes[field] = given[option]
    return changes
