"""Tables and summaries for people: Rich in a terminal, plain aligned text in a pipe.

Piped output keeps the shape scripts and tests already read: columns two spaces apart, a
header line, no colour codes and no wrapping.
"""

import io
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from service.usage.efficiency import duration

#: Rich styles of job and GPU states in a terminal.
STYLES = {
    "queued": "yellow",
    "starting": "cyan",
    "running": "bold cyan",
    "succeeded": "green",
    "failed": "bold red",
    "cancelled": "magenta",
    "timed_out": "red",
    "free": "green",
    "in_use": "cyan",
    "draining": "yellow",
    "quarantined": "bold red",
}

PLAIN_WIDTH = 100_000  # wide enough that no piped line is ever wrapped


def show(renderable: RenderableType) -> None:
    """Prints to stdout: with Rich's colours in a terminal, as `plain` text otherwise."""
    if sys.stdout.isatty():
        Console(highlight=False).print(renderable)
    else:
        print(plain(renderable), flush=True)


def plain(renderable: RenderableType) -> str:
    """The text of `renderable` without colour codes, lines unwrapped and right-trimmed."""
    buffer = io.StringIO()
    console = Console(
        file=buffer, width=PLAIN_WIDTH, color_system=None, force_terminal=False, highlight=False
    )
    console.print(renderable)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    """Columns two spaces apart under bold headers; `None` cells are blank. Cells are
    shown as text, never read as Rich markup (job names are anyone's)."""
    grid = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for header in headers:
        grid.add_column(header)
    for row in rows:
        grid.add_row(
            *(c if isinstance(c, Text) else Text("" if c is None else str(c)) for c in row)
        )
    return grid


def state(value: str) -> Text:
    """A job or GPU state, coloured in a terminal."""
    return Text(value, style=STYLES.get(value, ""))


def progress_text(job: dict[str, Any]) -> str:
    """`epoch 2/4 38%`, or "" before the first epoch."""
    p = job.get("progress") or {}
    if not p.get("epoch"):
        return ""
    text = f"epoch {p['epoch']}/{p['epochs']}"
    if p.get("fraction") is not None:
        text += f" {100 * p['fraction']:.0f}%"
    return text


def session_text(job: dict[str, Any]) -> str:
    """`open since 14:02, idle since 14:30` for a running session; "" for anything else."""
    if _kind(job) != "session" or job["status"] != "running":
        return ""
    text = f"open since {_clock(job.get('running_at') or job.get('started_at'))}"
    if job.get("idle_since"):
        text += f", idle since {_clock(job['idle_since'])}"
    return text


def jobs_table(jobs: Sequence[dict[str, Any]]) -> Table:
    """`gpuq ls`: one row per job."""
    rows = [
        (
            j["id"],
            j["name"],
            _kind(j),
            j["owner"],
            state(j["status"]),
            ",".join(map(str, j["assigned_gpus"])) or "-",
            session_text(j)
            or progress_text(j)
            or j.get("reason")
            or ("held" if j.get("held") else ""),
            _when(j["created_at"]),
        )
        for j in jobs
    ]
    headers = ["ID", "NAME", "KIND", "OWNER", "STATUS", "GPUS", "PROGRESS/REASON", "SUBMITTED"]
    return table(headers, rows)


def gpus_table(gpus: Sequence[dict[str, Any]]) -> Table:
    """`gpuq gpus`: memory, processes gpuq did not start, and the jobs on each GPU; under
    Slurm, the partition's GPU nodes."""
    if gpus and "node" in gpus[0]:
        return nodes_table(gpus)
    rows = [
        (
            g["index"],
            g["name"] + (" (sim)" if g.get("simulated") else ""),
            state(g["state"]),
            f"{g['memory_used_mb']}/{g['memory_total_mb']}",
            g["memory_free_mb"],
            sum(p["memory_mb"] for p in g["foreign_processes"]) or "-",
            ", ".join(
                f"{a['job_id']}" + (f":{a['memory_mb']}" if a["memory_mb"] else ":whole")
                for a in g["allocations"]
            )
            or "-",
        )
        for g in gpus
    ]
    headers = ["GPU", "NAME", "STATE", "USED/TOTAL MiB", "FREE MiB", "OTHERS MiB", "JOBS (MiB)"]
    if any(g.get("maintenance") for g in gpus):  # the column only while something is drained
        drained = [_drained(g.get("maintenance")) for g in gpus]
        return table([*headers, "DRAINED"], [(*r, d) for r, d in zip(rows, drained, strict=True)])
    return table(headers, rows)


def _drained(maintenance: dict[str, Any] | None) -> str:
    if not maintenance:
        return "-"
    why = f": {maintenance['reason']}" if maintenance["reason"] else ""
    return f"by {maintenance['by']}{why}"


def nodes_table(nodes: Sequence[dict[str, Any]]) -> Table:
    rows = [(n["node"], n["gpus"], n["gpus_allocated"], n["gpus_free"], n["state"]) for n in nodes]
    return table(["NODE", "GPUS", "ALLOCATED", "FREE", "STATE"], rows)


def gpu_line(gpu: dict[str, Any]) -> str:
    """One GPU's state, and why when it is held back."""
    why = f": {gpu['state_reason']}" if gpu.get("state_reason") else ""
    return f"GPU {gpu['index']} is {gpu['state']}{why}"


def artifacts_table(artifacts: Sequence[dict[str, Any]]) -> Table:
    """`gpuq artifacts ID`: a job's files."""
    rows = [(a["name"], f"{a['size_bytes']:,}", _when(a["modified_at"])) for a in artifacts]
    return table(["NAME", "BYTES", "MODIFIED"], rows)


def users_table(users: Sequence[dict[str, Any]]) -> Table:
    """`gpuq users ls`: names and roles, never tokens."""
    rows = [
        (
            u["name"],
            "admin" if u["admin"] else "user",
            u.get("unix_user") or "-",
            "revoked" if u["revoked"] else "active",
            u["created_at"][:16].replace("T", " "),
        )
        for u in users
    ]
    return table(["NAME", "ROLE", "UNIX USER", "STATE", "ADDED"], rows)


def audit_table(entries: Sequence[dict[str, Any]]) -> Table:
    """`gpuq audit`: who did what to which job, GPU or user, newest first."""
    rows = [
        (
            e["id"],
            _when(e["at"]),
            e["actor"],
            e["action"],
            e["target"],
            " ".join(f"{k}={v}" for k, v in (e.get("detail") or {}).items()),
        )
        for e in entries
    ]
    return table(["ID", "WHEN", "ACTOR", "ACTION", "TARGET", "DETAIL"], rows)


def _rate(samples_per_s: float | None, replicas: int | None) -> str:
    """Throughput, and per replica where there are several: what all-reduce costs shows."""
    if not samples_per_s:
        return ""
    text = f"{samples_per_s:,.0f} samples/s"
    if replicas and replicas > 1:
        text += f" ({samples_per_s / replicas:,.0f} per replica)"
    return text


def _progress_details(job: dict[str, Any]) -> str:
    p = job["progress"]
    extra = [f"step {p['step']}/{p['steps']}" if p.get("step") and p.get("steps") else ""]
    extra.append(_rate(p.get("samples_per_s"), job.get("num_replicas")))
    extra.append(f"ETA {p['eta_s']:.0f}s" if p.get("eta_s") and job["status"] == "running" else "")
    return f"  progress: {progress_text(job)} " + " ".join(e for e in extra if e)


def _attempt_line(attempt: dict[str, Any]) -> str:
    """One earlier attempt: how it ended, and the work it lost."""
    if attempt.get("reason") == "preempted":
        by = attempt.get("preempted_by")
        said = f"preempted by job {by}" if by else "preempted (by Slurm)"
    else:
        said = f"{attempt.get('reason') or 'ended'}: {attempt.get('message') or ''}".rstrip(": ")
    lost = attempt.get("lost_s")
    redone = ""
    if lost is not None:
        redone = f"; {duration(lost) if lost >= 1 else 'under a second'} of work redone"
    return f"  attempt {attempt['attempt']}: {said}{redone}"


def nodes_text(nodes: list[dict[str, Any]]) -> str:
    """`gpu-n1 (chief, GPUs 0,1), gpu-n2 (GPUs 0,1)`: a job's nodes and their GPUs."""
    return ", ".join(
        f"{n['node']} ("
        + ("chief, " if n["rank"] == 0 else "")
        + (f"GPUs {n['gpus']}" if n.get("gpus") else "no GPU")
        + ")"
        for n in nodes
    )


def job_summary(job: dict[str, Any]) -> str:
    """`gpuq show ID`: state, GPUs, why it waits, progress, metrics, GPU memory, warnings,
    reason, times, log tail."""
    noun = "session" if _kind(job) == "session" else "job"
    lines = [
        f"{noun} {job['id']} ({job['name']}) by {job['owner']}: {job['status']}",
        f"  GPUs: {','.join(map(str, job['assigned_gpus'])) or '-'}"
        + (f", {job['memory_mb']} MiB each" if job.get("memory_mb") else "")
        + (f", {_plural(job['num_replicas'], 'replica')}" if job.get("num_replicas") else ""),
    ]
    if job.get("nodes"):
        lines.append("  nodes: " + nodes_text(job["nodes"]))
    elif job.get("spec", {}).get("resources", {}).get("nodes", 1) > 1:
        nodes = job["spec"]["resources"]["nodes"]
        lines.append(f"  nodes: {nodes}, {job['spec']['resources'].get('gpus', 1)} GPU(s) each")
    if session_text(job):
        lines.append(f"  interactive: {session_text(job)}")
    if job.get("executor"):
        lines.append(f"  executor: {job['executor']}, job id {job.get('executor_job_id') or '-'}")
    if job.get("priority"):
        lines.append(f"  priority: {job['priority']}")
    if job.get("held") and not job.get("wait_reason"):
        lines.append(f"  held: it will not start until `gpuq release {job['id']}`")
    if job.get("wait_reason"):
        where = f" (position {job['queue_position']})" if job.get("queue_position") else ""
        lines.append(f"  waiting{where}: {job['wait_reason']}")
    if progress_text(job):
        lines.append(_progress_details(job))
    if job.get("metrics"):
        metrics = ", ".join(
            f"{k}={v:.4g}" if v is not None else f"{k}=nan" for k, v in job["metrics"].items()
        )
        lines.append(f"  metrics: {metrics}")
    if job.get("gpu_memory_peak_mb") is not None:
        lines.append(f"  GPU memory peak: {job['gpu_memory_peak_mb']} MiB")
    if (job.get("efficiency") or {}).get("text"):
        lines.append(f"  efficiency: {job['efficiency']['text']}")
    lines.extend(f"  warning: {warning}" for warning in job.get("warnings") or [])
    if job.get("reason"):
        lines.append(f"  reason: {job['reason']}: {job.get('message') or ''}")
    lines.extend(_attempt_line(a) for a in job.get("previous_attempts") or [])
    for key in ("created_at", "started_at", "running_at", "finished_at"):
        if job.get(key):
            lines.append(f"  {key.removesuffix('_at')}: {_when(job[key])}")
    if job.get("log_tail"):
        lines.append("  last log lines:")
        lines.extend(f"    {line}" for line in job["log_tail"][-10:])
    if job.get("hidden"):
        lines.append(
            f"  hidden from you ({job['owner']}'s and admins'): {', '.join(job['hidden'])}"
        )
    return "\n".join(lines)


def _when(value: str) -> str:
    return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S")


def _clock(value: str | None) -> str:
    """The time of day of `value` here, or `?`."""
    return datetime.fromisoformat(value).astimezone().strftime("%H:%M") if value else "?"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _kind(job: dict[str, Any]) -> str:
    return str((job.get("spec") or {}).get("kind") or "keras")
