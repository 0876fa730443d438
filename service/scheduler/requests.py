"""Placement requests from queued jobs and from specs."""

from service.models import Job
from service.scheduler.placement import Request
from service.spec import JobSpec

#: The id a dry run's job takes: after every real job, as a job submitted now would be.
PREVIEW_ID = 2**62


def request_for_job(job: Job) -> Request:
    """A queued job's request, from its stored columns (no spec parsing per tick)."""
    assert job.id is not None
    gpu_ids = job.spec["resources"].get("gpu_ids")
    return Request(
        job_id=job.id,
        priority=job.priority,
        gpus=job.gpu_count,
        gpu_ids=tuple(gpu_ids) if gpu_ids else None,
        memory_mb=job.memory_mb,
        owner=job.owner,
        time_limit_s=job.spec.get("time_limit_s"),
    )


def request_for_spec(job_id: int, spec: JobSpec, owner: str) -> Request:
    """The request a spec would make, e.g. for a dry run."""
    res = spec.resources
    return Request(
        job_id=job_id,
        priority=spec.priority,
        gpus=res.gpu_count,
        gpu_ids=tuple(res.gpu_ids) if res.gpu_ids else None,
        memory_mb=res.memory_mb if res.gpu_count else None,
        owner=owner,
        time_limit_s=spec.time_limit_s,
    )
