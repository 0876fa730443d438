"""`triage_job`: why job N failed, or why it is still waiting, from what gpuq knows (its
reason and message, its log's tail, its wait reason, a dry run of the same spec), with what
to try next; for an agent to act on."""

from typing import Any

from gpuq.client import Gpuq, Preview
from gpuq.http import ApiError
from service.cli.agent.answers import Triage

#: lines of the log a triage shows
TAIL_LINES = 30

#: what to try after an attempt ended for this reason, most likely first
NEXT_STEPS = {
    "gpu_oom": [
        "ask for more GPU memory (`memory`, or whole GPUs) or more GPUs",
        "lower the batch size",
    ],
    "memory_cap_exceeded": ["raise `memory` (its per-GPU cap) or lower the batch size"],
    "host_oom": ["ask for more host memory (`host_memory`)", "load less data into RAM at once"],
    "time_limit": [
        "raise `time_limit`",
        "save checkpoints in GPUQ_CHECKPOINT_DIR so a rerun resumes",
    ],
    "nonzero_exit": ["read `log_tail`: the program's own error; fix it and rerun"],
    "signal": ["read `log_tail`; a signal it did not expect is often a crash in native code"],
    "idle": ["it held GPUs without training: look for a hang, or set idle_exempt"],
    "launch_error": ["check the program's path and its folder, then rerun"],
    "invalid_spec": ["fix the spec field the message names, then submit again"],
    "dependency_failed": ["triage the job it depended on (`depends_on`) first"],
    "worker_lost": ["gpuq lost its process (the host restarted?): rerun it"],
    "device_mismatch": ["the job saw other GPUs than it was given: tell an admin"],
    "placement_violation": ["it used a GPU it was not given: use only CUDA_VISIBLE_DEVICES"],
    "early_stopped": ["its sweep's stopping rule found it trailing: nothing to fix"],
}


def triage(gq: Gpuq, job_id: int) -> Triage:
    """The triage of job `job_id` as its user may see it."""
    job = gq.http.json("GET", f"/v1/jobs/{job_id}")
    status = job["status"]
    if status == "queued":
        return _waiting(gq, job)
    found = Triage(
        job_id=job_id,
        status=status,
        verdict=_ended_words(job) if status not in ("starting", "running") else _running_words(job),
        next_steps=NEXT_STEPS.get(job.get("reason") or "", []),
        reason=job.get("reason"),
        message=job.get("message"),
        exit_code=job.get("exit_code"),
        log_tail=job.get("log_tail") or _tail(gq, job_id),
    )
    if status == "running":
        found.next_steps = ["follow it: job_log, job_metrics or gpuq://jobs/N/log"]
    return found


def _ended_words(job: dict[str, Any]) -> str:
    words = f"job {job['id']} {job['status']}"
    if job.get("reason"):
        words += f" ({job['reason']})"
    return f"{words}: {job['message']}" if job.get("message") else words


def _running_words(job: dict[str, Any]) -> str:
    progress = job.get("progress") or {}
    where = f", epoch {progress['epoch']}/{progress['epochs']}" if progress.get("epoch") else ""
    gpus = ",".join(str(g) for g in job.get("assigned_gpus", []))
    on = f"GPU {gpus}" if gpus else "the CPU"
    return f"job {job['id']} is {job['status']} on {on}{where}"


def _waiting(gq: Gpuq, job: dict[str, Any]) -> Triage:
    steps = []
    verdict = f"job {job['id']} waits: {job.get('wait_reason') or 'for its turn'}"
    if job.get("held"):
        verdict = f"job {job['id']} is held: it starts only once released"
        steps.append("release_job, if it should run")
    for other in job.get("depends_on") or []:
        steps.append(f"it starts once job {other} has succeeded: triage job {other}")
    preview = _same_spec_now(gq, job["id"])
    if preview is not None and preview.would_start and not job.get("held"):
        steps.append("the same spec would start now: it waits on order, time or dependencies")
    elif preview is not None:
        steps.append("ask for fewer GPUs or a memory cap (dry_run shows where it would fit)")
        steps.append("give a time_limit: short jobs backfill around reservations and heads")
    return Triage(
        job_id=job["id"],
        status="queued",
        verdict=verdict,
        next_steps=steps,
        wait_reason=job.get("wait_reason"),
        queue_position=job.get("queue_position"),
        dry_run=preview,
    )


def _same_spec_now(gq: Gpuq, job_id: int) -> Preview | None:
    """Where the same spec would start now; None where the user may not rerun it."""
    try:
        answer = gq.http.json("POST", f"/v1/jobs/{job_id}/rerun", params={"dry_run": "true"})
    except ApiError:
        return None
    return Preview.model_validate(answer)


def _tail(gq: Gpuq, job_id: int) -> list[str]:
    try:
        text = gq.logs(job_id, tail=TAIL_LINES)
    except ApiError:  # someone else's log, or none yet
        return []
    return text.splitlines()[-TAIL_LINES:]
