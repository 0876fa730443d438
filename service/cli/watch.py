"""`gpuq watch ID`: a live progress bar from long polls, ending with the job's final state.

In a terminal the bar is Rich's, redrawn in place; in a pipe each change is one plain line
(`progress_line`), and with `--json` one job object per line.
"""

import json
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from gpuq.http import Client
from service.cli.tables import STYLES, progress_text, untold_total

BAR_WIDTH = 24


def _fraction(job: dict[str, Any]) -> float | None:
    """Share of training done, 0..1; None before the first epoch, while queued, or for a
    job that tells no total."""
    p = job.get("progress") or {}
    if job["status"] == "queued" or not p.get("epoch") or untold_total(job):
        return None
    return min(1.0, max(0.0, p.get("fraction") or 0.0))


def _head(job: dict[str, Any]) -> str:
    """`job 4 running`, or for a job that has no bar yet, what it is waiting for."""
    head = f"job {job['id']} {job['status']}"
    if job["status"] == "queued":
        where = f" #{job['queue_position']}" if job.get("queue_position") else ""
        return f"{head}{where}: {job.get('wait_reason') or 'waiting'}"
    if _fraction(job) is None and job["status"] == "starting":
        return f"{head}: starting TensorFlow"
    if untold_total(job) and job["status"] != "queued":
        return f"{head}: {progress_text(job)}"  # `epoch 27 · val_loss 0.152`: no bar to draw
    return head


def _bar_details(job: dict[str, Any]) -> list[str]:
    """Epoch and step, speed, ETA and the latest metrics."""
    p = job["progress"]
    parts = [f"epoch {p['epoch']}/{p['epochs']}"]
    if p.get("step") and p.get("steps"):
        parts.append(f"step {p['step']}/{p['steps']}")
    if p.get("samples_per_s"):
        parts.append(f"{p['samples_per_s']:,.0f} samples/s")
    if p.get("eta_s") is not None and job["status"] == "running":
        parts.append(f"ETA {_duration(p['eta_s'])}")
    metrics = job.get("metrics") or {}
    parts.extend(f"{k}={_metric_or_nan(v)}" for k, v in metrics.items())
    return parts


def progress_line(job: dict[str, Any]) -> str:
    """One line: state, bar, percent, epoch and step, speed, ETA and the latest metrics."""
    fraction = _fraction(job)
    if fraction is None:
        return _head(job)
    filled = round(fraction * BAR_WIDTH)
    bar = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {100 * fraction:3.0f}%"
    return "  ".join([f"{_head(job)} {bar}", *_bar_details(job)])


def progress_view(job: dict[str, Any]) -> RenderableType:
    """What a terminal shows: state, Rich's bar and percent, then the details of
    `progress_line` on a line of their own, so a narrow terminal does not break the bar."""
    head = Text(_head(job), style=STYLES.get(job["status"], ""))
    fraction = _fraction(job)
    if fraction is None:
        return head
    bar = Table.grid(padding=(0, 1))
    bar.add_row(
        head,
        ProgressBar(
            total=1.0,
            completed=fraction,
            width=BAR_WIDTH,
            complete_style="cyan",
            finished_style="green",
        ),
        Text(f"{100 * fraction:3.0f}%"),
    )
    return Group(bar, Text("  " + "  ".join(_bar_details(job))))


def final_line(job: dict[str, Any]) -> str:
    """How the job ended: state, reason and message, exit code."""
    text = f"job {job['id']} {job['status']}"
    if job.get("reason"):
        text += f" ({job['reason']}): {job.get('message') or ''}".rstrip(": ")
    if job.get("exit_code") is not None:
        text += f" [exit code {job['exit_code']}]"
    return text


def watch_progress(client: Client, job_id: int, *, as_json: bool, out: TextIO | None = None) -> int:
    """Draws the job until it ends; 0 if it succeeded, 1 otherwise."""
    out = out or sys.stdout
    if as_json:
        job = _print_each(client.changes(job_id), out, json.dumps, dedupe=False)
    elif out.isatty():
        job = _draw_live(client.changes(job_id), Console(file=out, highlight=False))
    else:
        job = _print_each(client.changes(job_id), out, progress_line, dedupe=True)
    if not as_json:
        out.write(final_line(job) + "\n")
        if job["status"] != "succeeded":
            out.writelines(f"  {line}\n" for line in job.get("log_tail") or [])
        out.flush()
    return 0 if job["status"] == "succeeded" else 1


def _print_each(
    jobs: Iterator[dict[str, Any]],
    out: TextIO,
    line_of: Callable[[dict[str, Any]], str],
    *,
    dedupe: bool,
) -> dict[str, Any]:
    """Writes a line per job seen (per changed line with `dedupe`); returns the last job."""
    shown: str | None = None
    last: dict[str, Any] = {}
    for job in jobs:
        line = line_of(job)
        if not dedupe or line != shown:
            out.write(line + "\n")
            out.flush()
        shown, last = line, job
    return last


def _draw_live(jobs: Iterator[dict[str, Any]], console: Console) -> dict[str, Any]:
    """Redraws the bar in place at each change; returns the last job."""
    job = next(jobs)
    with Live(progress_view(job), console=console, auto_refresh=False) as view:
        for job in jobs:
            view.update(progress_view(job), refresh=True)
    return job


def _duration(seconds: float) -> str:
    s = round(seconds)
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def _metric_or_nan(value: float | None) -> str:
    return "nan" if value is None else f"{value:.4g}"
