"""`gpuq watch ID`: a live progress bar from long polls, ending with the job's final state."""

import json
import sys
from typing import Any, TextIO

from service.cli.client import Client
from service.states import TERMINAL

BAR_WIDTH = 24
POLL_WAIT_S = 30


def progress_line(job: dict[str, Any]) -> str:
    """One line: state, bar, percent, epoch and step, speed, ETA and the latest metrics."""
    p = job.get("progress") or {}
    head = f"job {job['id']} {job['status']}"
    if job["status"] == "queued":
        where = f" #{job['queue_position']}" if job.get("queue_position") else ""
        return f"{head}{where}: {job.get('wait_reason') or 'waiting'}"
    if not p.get("epoch"):
        return f"{head}: starting TensorFlow" if job["status"] == "starting" else head
    fraction = min(1.0, max(0.0, p.get("fraction") or 0.0))
    filled = round(fraction * BAR_WIDTH)
    parts = [
        f"{head} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {100 * fraction:3.0f}%",
        f"epoch {p['epoch']}/{p['epochs']}",
    ]
    if p.get("step") and p.get("steps"):
        parts.append(f"step {p['step']}/{p['steps']}")
    if p.get("samples_per_s"):
        parts.append(f"{p['samples_per_s']:,.0f} samples/s")
    if p.get("eta_s") is not None and job["status"] == "running":
        parts.append(f"ETA {_duration(p['eta_s'])}")
    metrics = job.get("metrics") or {}
    parts.extend(f"{k}={_number(v)}" for k, v in metrics.items())
    return "  ".join(parts)


def final_line(job: dict[str, Any]) -> str:
    text = f"job {job['id']} {job['status']}"
    if job.get("reason"):
        text += f" ({job['reason']}): {job.get('message') or ''}".rstrip(": ")
    if job.get("exit_code") is not None:
        text += f" [exit code {job['exit_code']}]"
    return text


def watch(client: Client, job_id: int, *, as_json: bool, out: TextIO = sys.stdout) -> int:
    """Draws the job until it ends; 0 if it succeeded, 1 otherwise."""
    live = out.isatty() and not as_json
    job = client.json("GET", f"/v1/jobs/{job_id}")
    shown = ""
    while True:
        if as_json:
            out.write(json.dumps(job) + "\n")
        else:
            line = progress_line(job)
            if live:
                out.write("\r\x1b[2K" + line)
            elif line != shown:
                out.write(line + "\n")
            shown = line
        out.flush()
        if job["status"] in TERMINAL:
            break
        params = {"wait_s": POLL_WAIT_S, "since": job["revision"]}
        job = client.json("GET", f"/v1/jobs/{job_id}", params=params, timeout=POLL_WAIT_S + 30)
    if not as_json:
        out.write(("\n" if live else "") + final_line(job) + "\n")
        if job["status"] != "succeeded":
            out.writelines(f"  {line}\n" for line in job.get("log_tail") or [])
    return 0 if job["status"] == "succeeded" else 1


def _duration(seconds: float) -> str:
    s = round(seconds)
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def _number(value: float | None) -> str:
    return "nan" if value is None else f"{value:.4g}"
