"""Job commands: submit (or dry-run), ls, show, logs, watch, cancel, hold, release, priority."""

import json
import sys
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from gpuq.contract.states import JobStatus
from service.cli import tables
from service.cli.job_summary import job_summary, sweep_metrics
from service.cli.options import JobIdArg, JsonFlag, api_client, print_json
from service.cli.snapshot_upload import SnapshotFlag, of_submitted
from service.cli.spec_files import read_spec_file
from service.cli.watch import watch_progress


def submit(
    ctx: typer.Context,
    file: Annotated[
        str, typer.Argument(metavar="FILE", help="A job spec, JSON or YAML; - reads stdin.")
    ],
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="Replaying the same key returns the same job instead of a new one."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Only say where the job would go now, or why it would wait."
        ),
    ] = False,
    snapshot: SnapshotFlag = None,
    as_json: JsonFlag = False,
) -> None:
    """Submit a job spec, or with --dry-run only say where it would go. A command whose
    `workdir` is in a git work tree runs a snapshot of it, as `gpuq run` does.

    Exits 2 if the file cannot be read.
    """
    spec = read_spec_file(file)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    params = {"dry_run": "true"} if dry_run else {}
    api = api_client(ctx)
    if not dry_run:
        spec = of_submitted(api, spec, snapshot)
    answer = api.json("POST", "/v1/jobs", json=spec, headers=headers, params=params)
    if as_json:
        print_json(answer)
    elif dry_run:
        print(preview_text(answer))
    else:
        print(f"submitted job {answer['id']} ({answer['name']}): {answer['status']}")


def preview_text(preview: dict[str, Any]) -> str:
    """A dry run's answer: the GPUs a job would start on now, or why it would wait."""
    if preview["would_start"]:
        gpus = preview["assigned_gpus"]
        cap = f", {preview['memory_mb']} MiB each" if preview.get("memory_mb") else ""
        why = f"\n  placed: {preview['placement']}" if preview.get("placement") else ""
        if not gpus:
            return "would start now (no GPU)"
        return f"would start now on {gpus_text(gpus)}{cap}{why}"
    if preview.get("would_preempt"):
        return str(preview["wait_reason"])  # "would preempt job 7 (...) and start once ..."
    ahead = preview.get("jobs_ahead") or 0
    behind = f" ({ahead} queued job{'' if ahead == 1 else 's'} ahead)" if ahead else ""
    return f"would wait: {preview.get('wait_reason') or 'waiting'}{behind}"


def list_jobs(
    ctx: typer.Context,
    status: Annotated[
        list[JobStatus] | None, typer.Option(help="Only this state (repeatable).")
    ] = None,
    owner: Annotated[str | None, typer.Option(help="Only this user's jobs.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many jobs.")] = 50,
    cursor: Annotated[
        str | None, typer.Option(help="The next page: `next_cursor` from --json.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List jobs, newest first."""
    params: dict[str, Any] = {"limit": limit}
    if status:
        params["status"] = [s.value for s in status]
    if owner:
        params["owner"] = owner
    if cursor:
        params["cursor"] = cursor
    api = api_client(ctx)
    page = api.json("GET", "/v1/jobs", params=params)
    if as_json:
        print_json(page)
    elif page["jobs"]:
        tables.print_rendered(tables.jobs_table(page["jobs"], sweep_metrics(api, page["jobs"])))
    else:
        print("no jobs")


def show(ctx: typer.Context, job_id: JobIdArg, as_json: JsonFlag = False) -> None:
    """One job in detail: state, GPUs, progress, metrics, why it waits or ended."""
    api = api_client(ctx)
    job = api.json("GET", f"/v1/jobs/{job_id}")
    if as_json:
        print_json(job)
    else:
        print(job_summary(job, sweep_metrics(api, [job]).get(job.get("sweep_id"))))


def logs(
    ctx: typer.Context,
    job_id: JobIdArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream until the job ends.")
    ] = False,
    tail: Annotated[int | None, typer.Option(help="Only the last N lines.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """A job's output (stdout and stderr); -f follows it until the job ends.

    With --json, one {"job_id", "line"} object per line.
    """
    params: dict[str, Any] = {"tail": tail} if tail else {}
    path = f"/v1/jobs/{job_id}/logs"
    api = api_client(ctx)
    if follow:
        chunks = api.stream(path, follow="true", **params)
    else:
        chunks = iter([api.request("GET", path, params=params).content])
    print_output(job_id, chunks, as_json=as_json)


def gpus_text(gpus: list[int]) -> str:
    """`GPU 0`, `GPUs 0,2`."""
    return f"GPU {gpus[0]}" if len(gpus) == 1 else f"GPUs {','.join(map(str, gpus))}"


def print_output(job_id: int, chunks: Iterator[bytes], *, as_json: bool) -> None:
    """A job's log to stdout as it comes: as it is, or (`as_json`) a JSON object a line."""
    if as_json:
        print_lines_as_json(job_id, chunks)
        return
    for chunk in chunks:
        sys.stdout.buffer.write(chunk)
        sys.stdout.flush()


def print_lines_as_json(job_id: int, chunks: Iterator[bytes]) -> None:
    """One `{"job_id", "line"}` object per log line, each printed as soon as it is whole."""
    pending = b""
    for chunk in chunks:
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            print(json.dumps({"job_id": job_id, "line": line.decode(errors="replace")}), flush=True)
    if pending:
        print(json.dumps({"job_id": job_id, "line": pending.decode(errors="replace")}))


def watch(ctx: typer.Context, job_id: JobIdArg, as_json: JsonFlag = False) -> None:
    """A live progress bar until the job ends; exits 0 if it succeeded, 1 if not."""
    code = watch_progress(api_client(ctx), job_id, as_json=as_json)
    if code:
        raise typer.Exit(code)


def cancel(ctx: typer.Context, job_id: JobIdArg, as_json: JsonFlag = False) -> None:
    """Cancel a job: a queued one at once, a running one with SIGTERM, then SIGKILL."""
    job = api_client(ctx).json("POST", f"/v1/jobs/{job_id}/cancel")
    if as_json:
        print_json(job)
    elif job["status"] == "cancelled":
        print(f"job {job['id']} cancelled")
    else:
        print(f"job {job['id']} is stopping (SIGTERM sent; SIGKILL after the grace period)")


def hold(ctx: typer.Context, job_id: JobIdArg, as_json: JsonFlag = False) -> None:
    """Keep a queued job from starting until `gpuq release ID`."""
    job = api_client(ctx).json("POST", f"/v1/jobs/{job_id}/hold")
    if as_json:
        print_json(job)
    else:
        print(f"job {job['id']} held: it will not start until `gpuq release {job['id']}`")


def release(ctx: typer.Context, job_id: JobIdArg, as_json: JsonFlag = False) -> None:
    """Let a held job start again."""
    job = api_client(ctx).json("POST", f"/v1/jobs/{job_id}/release")
    if as_json:
        print_json(job)
    else:
        print(f"job {job['id']} released: it may start again")


def priority(
    ctx: typer.Context,
    job_id: JobIdArg,
    value: Annotated[
        int, typer.Argument(metavar="N", help="Higher starts first; only admins may raise it.")
    ],
    as_json: JsonFlag = False,
) -> None:
    """Change a job's priority (negative values work: `gpuq priority 7 -5`)."""
    job = api_client(ctx).json("PATCH", f"/v1/jobs/{job_id}", json={"priority": value})
    if as_json:
        print_json(job)
    else:
        print(f"job {job['id']} now has priority {job['priority']}")


#: Lets `gpuq priority 7 -5` read `-5` as the value, not as an unknown option.
PRIORITY_SETTINGS = {"ignore_unknown_options": True}
