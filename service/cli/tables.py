"""Tables and summaries for people: Rich in a terminal, plain aligned text in a pipe.

Piped output keeps the shape scripts and tests already read: columns two spaces apart, a
header line, no colour codes and no wrapping.
"""

import io
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

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


def print_rendered(renderable: RenderableType) -> None:
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


def progress_text(job: dict[str, Any], sweep_metric: str | None = None) -> str:
    """`epoch 2/4 38%`; `epoch 27 · val_loss 0.152` for a job that tells no total (its
    headline metric, `headline_metric`); "" before the first epoch."""
    p = job.get("progress") or {}
    if not p.get("epoch"):
        return ""
    if untold_total(job):
        name = headline_metric(job.get("metrics") or {}, sweep_metric)
        if name is None:
            return f"epoch {p['epoch']}"
        return f"epoch {p['epoch']} · {name} {metric_value(job['metrics'][name])}"
    text = f"epoch {p['epoch']}/{p['epochs']}" if p.get("epochs") else f"epoch {p['epoch']}"
    if p.get("fraction") is not None:
        text += f" {100 * p['fraction']:.0f}%"
    return text


def untold_total(job: dict[str, Any]) -> bool:
    """Whether the job reports epochs but neither how many nor a share done (`gpuq.report`):
    there is nothing to draw a bar from."""
    p = job.get("progress") or {}
    return bool(p.get("epoch")) and p.get("epochs") is None and p.get("fraction") is None


def headline_metric(metrics: Mapping[str, Any], sweep_metric: str | None = None) -> str | None:
    """The one metric a progress line shows: the sweep's (a member's), else `val_loss`, else
    `loss`, else the first reported; None if none is. The dashboard's `headlineMetric`
    follows the same rule."""
    for name in (sweep_metric, "val_loss", "loss"):
        if name and name in metrics:
            return name
    return next(iter(metrics), None)


def metric_value(value: float | None) -> str:
    """Three significant digits, `nan` for null: `0.152`, `1230`, `2.5e-05`."""
    return "nan" if value is None else f"{float(f'{value:.3g}'):g}"


def session_text(job: dict[str, Any]) -> str:
    """`open since 14:02, idle since 14:30` for a running session; "" for anything else."""
    if kind_of(job) != "session" or job["status"] != "running":
        return ""
    text = f"open since {_time_of_day(job.get('running_at') or job.get('started_at'))}"
    if job.get("idle_since"):
        text += f", idle since {_time_of_day(job['idle_since'])}"
    return text


def jobs_table(
    jobs: Sequence[dict[str, Any]], sweep_metrics: Mapping[int, str | None] | None = None
) -> Table:
    """`gpuq ls`: one row per job; `sweep_metrics` (sweep id → its metric) picks what a
    member that tells no total shows."""
    sweep_metrics = sweep_metrics or {}
    rows = [
        (
            j["id"],
            j["name"],
            kind_of(j),
            j["owner"],
            state(j["status"]),
            ",".join(map(str, j["assigned_gpus"])) or "-",
            session_text(j)
            or progress_text(j, sweep_metrics.get(j["sweep_id"]) if j.get("sweep_id") else None)
            or j.get("reason")
            or ("held" if j.get("held") else ""),
            timestamp(j["created_at"]),
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
    rows = [(a["name"], f"{a['size_bytes']:,}", timestamp(a["modified_at"])) for a in artifacts]
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
            timestamp(e["at"]),
            e["actor"],
            e["action"],
            e["target"],
            " ".join(f"{k}={v}" for k, v in (e.get("detail") or {}).items()),
        )
        for e in entries
    ]
    return table(["ID", "WHEN", "ACTOR", "ACTION", "TARGET", "DETAIL"], rows)


def timestamp(value: str) -> str:
    return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S")


def _time_of_day(value: str | None) -> str:
    """The time of day of `value` here, or `?`."""
    return datetime.fromisoformat(value).astimezone().strftime("%H:%M") if value else "?"


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def kind_of(job: dict[str, Any]) -> str:
    return str((job.get("spec") or {}).get("kind") or "keras")
