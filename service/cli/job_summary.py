"""A job as `gpuq show` prints it: state, GPUs, why it waits, progress, metrics, GPU
memory, cores and host memory, warnings, reason, earlier attempts, times, log tail."""

from collections.abc import Iterable
from typing import Any

from gpuq.http import ApiError, Client
from service.cli.tables import kind_of, plural, progress_text, session_text, timestamp, untold_total
from service.usage.efficiency import duration, memory_amount


def sweep_metrics(api: Client, jobs: Iterable[dict[str, Any]]) -> dict[int, str | None]:
    """Sweep id → its metric, for the sweeps of those `jobs` that tell no total (their
    progress shows the metric instead of a bar); a sweep the caller cannot read is left out."""
    wanted = {job["sweep_id"] for job in jobs if job.get("sweep_id") and untold_total(job)}
    found: dict[int, str | None] = {}
    for sweep_id in sorted(wanted):
        try:
            found[sweep_id] = api.json("GET", f"/v1/sweeps/{sweep_id}")["metric"]
        except ApiError:  # the job's own view must not fail for want of its sweep's
            continue
    return found


def _rate(samples_per_s: float | None, replicas: int | None) -> str:
    """Throughput, and per replica where there are several: what all-reduce costs shows."""
    if not samples_per_s:
        return ""
    text = f"{samples_per_s:,.0f} samples/s"
    if replicas and replicas > 1:
        text += f" ({samples_per_s / replicas:,.0f} per replica)"
    return text


def _progress_details(job: dict[str, Any], sweep_metric: str | None) -> str:
    p = job["progress"]
    parts = [progress_text(job, sweep_metric)]
    parts.append(f"step {p['step']}/{p['steps']}" if p.get("step") and p.get("steps") else "")
    parts.append(_rate(p.get("samples_per_s"), job.get("num_replicas")))
    parts.append(f"ETA {p['eta_s']:.0f}s" if p.get("eta_s") and job["status"] == "running" else "")
    return "  progress: " + " ".join(part for part in parts if part)


def _attempt_line(attempt: dict[str, Any]) -> str:
    """One earlier attempt: how it ended, and the work it lost."""
    if attempt.get("reason") == "preempted":
        by = attempt.get("preempted_by")
        said = f"preempted by job {by}" if by else _first_clause(attempt.get("message"))
    else:
        said = f"{attempt.get('reason') or 'ended'}: {attempt.get('message') or ''}".rstrip(": ")
    lost = attempt.get("lost_s")
    redone = ""
    if lost is not None:
        redone = f"; {duration(lost) if lost >= 1 else 'under a second'} of work redone"
    return f"  attempt {attempt['attempt']}: {said}{redone}"


def _first_clause(message: str | None) -> str:
    """`preempted for reservation paper, ...` from a preemption's message; Slurm's gives none."""
    return message.split(";")[0] if message else "preempted (by Slurm)"


def host_line(job: dict[str, Any]) -> str:
    """`4 cores, 32 GiB of host memory; peak 22 GiB, 1 h 3 min CPU time`: what the job got
    of the box and, once an attempt has ended, what it used; empty if nothing is known."""
    got = []
    cores = job.get("cpus")
    if cores is not None:
        got.append(f"{cores:g} {'core' if cores == 1 else 'cores'}")
    if job.get("host_memory_mb") is not None:
        got.append(f"{memory_amount(job['host_memory_mb'])} of host memory")
    used = []
    if job.get("host_memory_peak_mb") is not None:
        used.append(f"peak {memory_amount(job['host_memory_peak_mb'])}")
    if job.get("cpu_time_s") is not None:
        used.append(f"{duration(job['cpu_time_s'])} CPU time")
    return "; ".join(part for part in (", ".join(got), ", ".join(used)) if part)


def nodes_text(nodes: list[dict[str, Any]]) -> str:
    """`gpu-n1 (chief, GPUs 0,1), gpu-n2 (GPUs 0,1)`: a job's nodes and their GPUs."""
    return ", ".join(
        f"{n['node']} ("
        + ("chief, " if n["rank"] == 0 else "")
        + (f"GPUs {n['gpus']}" if n.get("gpus") else "no GPU")
        + ")"
        for n in nodes
    )


def code_lines(spec: dict[str, Any]) -> list[str]:
    """Which code a job runs, as its spec says: its snapshot and where it came from (git,
    the interpreter, the lock file); none for a job that names neither."""
    command, said = spec.get("command") or {}, spec.get("provenance") or {}
    lines = []
    if command.get("snapshot"):
        inside = command.get("snapshot_workdir") or "."
        origin = f" (from {said['folder']})" if said.get("folder") else ""
        lines.append(f"code: snapshot {command['snapshot'][:12]}, in {inside}{origin}")
    if said.get("git_commit"):
        branch = f" on {said['git_branch']}" if said.get("git_branch") else " (detached)"
        state = "uncommitted changes" if said.get("git_dirty") else "clean"
        if said.get("git_diff_sha256"):
            state += f" (diff {said['git_diff_sha256'][:12]})"
        lines.append(f"git: {said['git_commit'][:12]}{branch}, {state}")
    if said.get("python"):
        lines.append(f"python: {said['python']}")
    if said.get("lockfile"):
        lines.append(f"lock file: {said['lockfile']} ({str(said.get('lockfile_sha256'))[:12]})")
    return lines


def job_summary(job: dict[str, Any], sweep_metric: str | None = None) -> str:
    """`gpuq show ID`: state, GPUs, why it waits, progress, metrics, GPU memory, warnings,
    reason, times, log tail; `sweep_metric`, a member's sweep's, heads its progress."""
    noun = "session" if kind_of(job) == "session" else "job"
    lines = [
        f"{noun} {job['id']} ({job['name']}) by {job['owner']}: {job['status']}",
        f"  GPUs: {','.join(map(str, job['assigned_gpus'])) or '-'}"
        + (f", {job['memory_mb']} MiB each" if job.get("memory_mb") else "")
        + (f", {plural(job['num_replicas'], 'replica')}" if job.get("num_replicas") else ""),
    ]
    if job.get("placement") and job["assigned_gpus"]:
        lines.append(f"  placed: {job['placement']}")
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
    lines.extend(f"  {line}" for line in code_lines(job.get("spec") or {}))
    if job.get("held") and not job.get("wait_reason"):
        lines.append(f"  held: it will not start until `gpuq release {job['id']}`")
    if job.get("wait_reason"):
        where = f" (position {job['queue_position']})" if job.get("queue_position") else ""
        lines.append(f"  waiting{where}: {job['wait_reason']}")
    if progress_text(job):
        lines.append(_progress_details(job, sweep_metric))
    if job.get("metrics"):
        metrics = ", ".join(
            f"{k}={v:.4g}" if v is not None else f"{k}=nan" for k, v in job["metrics"].items()
        )
        lines.append(f"  metrics: {metrics}")
    if job.get("gpu_memory_peak_mb") is not None:
        lines.append(f"  GPU memory peak: {job['gpu_memory_peak_mb']} MiB")
    if host_line(job):
        lines.append(f"  host: {host_line(job)}")
    if (job.get("efficiency") or {}).get("text"):
        lines.append(f"  efficiency: {job['efficiency']['text']}")
    lines.extend(f"  warning: {warning}" for warning in job.get("warnings") or [])
    if job.get("reason"):
        lines.append(f"  reason: {job['reason']}: {job.get('message') or ''}")
    lines.extend(_attempt_line(a) for a in job.get("previous_attempts") or [])
    for key in ("created_at", "started_at", "running_at", "finished_at"):
        if job.get(key):
            lines.append(f"  {key.removesuffix('_at')}: {timestamp(job[key])}")
    if job.get("log_tail"):
        lines.append("  last log lines:")
        lines.extend(f"    {line}" for line in job["log_tail"][-10:])
    if job.get("hidden"):
        lines.append(
            f"  hidden from you ({job['owner']}'s and admins'): {', '.join(job['hidden'])}"
        )
    return "\n".join(lines)
