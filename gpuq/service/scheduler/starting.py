"""Starting a placed job: claim it and its GPUs, work out its device plan, and hand it to
the executor."""

import logging
from typing import Any

from gpuq.contract.device_plan import DevicePlan
from gpuq.contract.spec import JobSpec
from gpuq.service import run_as
from gpuq.service.db import utcnow
from gpuq.service.executors import Executor, Launch, LaunchError, Started
from gpuq.service.jobs import writes
from gpuq.service.scheduler.placement import Placement
from gpuq.service.scheduler.running import Activity, Books, MemoryRecord, Running
from gpuq.service.tables import Job

log = logging.getLogger(__name__)

#: no training step is taken for hung sooner (a big model's first epoch ends with a
#: validation pass that compiles its own function)
MIN_STEP_TIMEOUT_S = 120.0


def device_plan(
    spec: JobSpec, indices: list[int], *, simulated: bool, headroom_mb: int, gpu_total_mb: int
) -> DevicePlan:
    """The device plan a worker applies: mode, GPUs and TensorFlow's cap per logical GPU.

    `gpu_total_mb` is the smallest assigned GPU's memory (0 where unknown), which bounds a
    whole-GPU job that splits its GPUs into `replicas_per_gpu` logical ones, and turns the
    cap into the fraction of a GPU that JAX takes.
    """
    res = spec.resources
    if not indices:
        return DevicePlan.cpu()
    limit = None
    if not res.memory_growth:
        if res.memory_mb is not None:
            limit = res.memory_mb - headroom_mb
        elif res.replicas_per_gpu > 1 and gpu_total_mb > headroom_mb:
            limit = gpu_total_mb - headroom_mb
    if limit is not None:
        limit //= res.replicas_per_gpu
    return DevicePlan(
        mode="sim" if simulated else "gpu",
        indices=tuple(indices),
        memory_limit_mb=limit,
        memory_growth=res.memory_growth,
        replicas_per_gpu=res.replicas_per_gpu,
        memory_total_mb=gpu_total_mb or None,
    )


def launch(
    books: Books, executor: Executor, job: Job, spec: JobSpec, devices: DevicePlan, **queueing: Any
) -> Started | None:
    """Hands `job`'s next attempt to `executor`, as whom it runs as and with a builtin
    job's step timeout; None if it could not start (the job then fails, `launch_error`).
    `queueing`: what a queueing executor orders and holds it by (`Launch`'s fields)."""
    assert job.id is not None
    attempt = Launch(
        job.id,
        job.attempt + 1,
        spec,
        devices,
        resume_from=job.attempt or None,
        step_timeout_s=max(books.settings.idle_after_s, MIN_STEP_TIMEOUT_S),
        **queueing,
    )
    try:
        return executor.start(run_as.launch_as(books.settings, books.db, attempt, job.unix_user))
    except LaunchError as exc:
        log.error("job %d: %s", job.id, exc)
        with books.db.write() as session:
            writes.fail_launch(session, job.id, str(exc))
        return None


def start_job(books: Books, job: Job, placement: Placement) -> None:
    """Claims `job` (if it is still queued) on the placement's GPUs and starts it."""
    assert job.id is not None
    attempt = job.attempt + 1
    indices = list(placement.gpu_indices)
    with books.db.write() as session:
        if not writes.claim_for_start(session, job.id, attempt, indices, placement.memory_mb):
            return  # cancelled meanwhile
    if attempt == 1:
        waited = (utcnow() - job.created_at).total_seconds()
        books.stats.queue_wait_seconds.observe(max(0.0, waited))
    spec = JobSpec.model_validate(job.spec)
    inventory = books.gpus.inventory
    totals = {d.index: d.memory_total_mb for d in inventory.devices}
    devices = device_plan(
        spec,
        indices,
        simulated=inventory.simulated,
        headroom_mb=books.settings.gpu_headroom_mb,
        gpu_total_mb=min((totals[i] for i in indices), default=0),
    )
    started = launch(books, books.executor, job, spec, devices)
    if started is None:
        return
    with books.db.write() as session:
        writes.record_launch(
            session, job.id, books.executor.name, started.executor_job_id, started.runner_pid
        )
    books.running[job.id] = Running(
        job.id,
        books.executor.run_dir(job.id, attempt),
        indices,
        MemoryRecord(placement.memory_mb),
        activity=Activity(exempt=spec.idle_exempt is not None),
    )
    log.info(
        "job %d: attempt %d started on GPUs %s by the %s executor (runner pid %s)",
        job.id,
        attempt,
        indices or "none (CPU)",
        books.executor.name,
        started.runner_pid,
    )
