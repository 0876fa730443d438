"""Plain-text tables and summaries for the CLI."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def progress_text(job: dict[str, Any]) -> str:
    p = job.get("progress") or {}
    if not p.get("epoch"):
        return ""
    text = f"epoch {p['epoch']}/{p['epochs']}"
    if p.get("fraction") is not None:
        text += f" {100 * p['fraction']:.0f}%"
    return text


def jobs_table(jobs: Sequence[dict[str, Any]]) -> str:
    rows = [
        (
            j["id"],
            j["name"],
            j["owner"],
            j["status"],
            ",".join(map(str, j["assigned_gpus"])) or "-",
            progress_text(j) or (j.get("reason") or ""),
            _when(j["created_at"]),
        )
        for j in jobs
    ]
    return table(["ID", "NAME", "OWNER", "STATUS", "GPUS", "PROGRESS/REASON", "SUBMITTED"], rows)


def gpus_table(gpus: Sequence[dict[str, Any]]) -> str:
    rows = [
        (
            g["index"],
            g["name"] + (" (sim)" if g.get("simulated") else ""),
            g["state"],
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
    return table(headers, rows)


def artifacts_table(artifacts: Sequence[dict[str, Any]]) -> str:
    rows = [(a["name"], f"{a['size_bytes']:,}", _when(a["modified_at"])) for a in artifacts]
    return table(["NAME", "BYTES", "MODIFIED"], rows)


def _rate(samples_per_s: float | None, replicas: int | None) -> str:
    """Throughput, and per replica where there are several: what all-reduce costs shows."""
    if not samples_per_s:
        return ""
    text = f"{samples_per_s:,.0f} samples/s"
    if replicas and replicas > 1:
        text += f" ({samples_per_s / replicas:,.0f} per replica)"
    return text


def job_summary(job: dict[str, Any]) -> str:
    lines = [
        f"job {job['id']} ({job['name']}) by {job['owner']}: {job['status']}",
        f"  GPUs: {','.join(map(str, job['assigned_gpus'])) or '-'}"
        + (f", {job['memory_mb']} MiB each" if job.get("memory_mb") else "")
        + (f", {_plural(job['num_replicas'], 'replica')}" if job.get("num_replicas") else ""),
    ]
    if job.get("wait_reason"):
        where = f" (position {job['queue_position']})" if job.get("queue_position") else ""
        lines.append(f"  waiting{where}: {job['wait_reason']}")
    if progress_text(job):
        p = job["progress"]
        extra = [f"step {p['step']}/{p['steps']}" if p.get("step") and p.get("steps") else ""]
        extra.append(_rate(p.get("samples_per_s"), job.get("num_replicas")))
        extra.append(
            f"ETA {p['eta_s']:.0f}s" if p.get("eta_s") and job["status"] == "running" else ""
        )
        lines.append(f"  progress: {progress_text(job)} " + " ".join(e for e in extra if e))
    if job.get("metrics"):
        metrics = ", ".join(
            f"{k}={v:.4g}" if v is not None else f"{k}=nan" for k, v in job["metrics"].items()
        )
        lines.append(f"  metrics: {metrics}")
    if job.get("reason"):
        lines.append(f"  reason: {job['reason']}: {job.get('message') or ''}")
    for key in ("created_at", "started_at", "running_at", "finished_at"):
        if job.get(key):
            lines.append(f"  {key.removesuffix('_at')}: {_when(job[key])}")
    if job.get("log_tail"):
        lines.append("  last log lines:")
        lines.extend(f"    {line}" for line in job["log_tail"][-10:])
    return "\n".join(lines)


def _when(value: str) -> str:
    return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S")


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
