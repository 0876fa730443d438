"""`GET /metrics` in the Prometheus text format, read fresh from the database and GPUs at
each scrape (so every API process answers the same), plus what only the scheduler knows
(`service.scheduler.stats`) where gpuq serve schedules. Units are Prometheus's: bytes and
seconds."""

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func
from sqlmodel import col, select

from gpuq.contract.states import ACTIVE, TERMINAL, JobStatus
from service.errors import Unavailable
from service.public import GpuNodePublic, GpuPublic, HostPublic, readable_progress
from service.runtime import Service
from service.store.db import utcnow
from service.store.tables import Job
from service.store.usage_tables import UsageTotal

MIB = 1024 * 1024


class GpuqCollector(Collector):
    def __init__(self, service: Service) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        yield from self._jobs()
        yield from self._gpus()
        if self.service.gpus.cluster is None:
            yield from _host(self.service.gpus.host())
        if self.service.scheduler is not None:
            yield from self.service.scheduler.metrics()

    def _jobs(self) -> Iterator[Metric]:
        with self.service.db.read() as session:
            counts = dict(session.exec(select(Job.status, func.count()).group_by(Job.status)).all())
            reasons = session.exec(
                select(Job.reason, func.count())
                .where(col(Job.status).in_(TERMINAL), col(Job.reason).is_not(None))
                .group_by(Job.reason)
            ).all()
            active = session.exec(select(Job).where(col(Job.status).in_(ACTIVE))).all()
            # In the same snapshot as `active`: an attempt that ends moves from one to the
            # other, never counted twice nor missed.
            ended_gpu_s = dict(session.exec(select(UsageTotal.owner, UsageTotal.gpu_seconds)).all())
        yield _by_state(counts)
        yield _by_reason(reasons)
        now = utcnow()
        yield from _active_jobs(active, now)
        yield _gpu_seconds(ended_gpu_s, active, now)

    def _gpus(self) -> Iterator[Metric]:
        try:
            listed = self.service.gpus.describe()
        except Unavailable:
            return  # Slurm did not answer: no node figures this time, the rest still count
        yield from _nodes([n for n in listed if isinstance(n, GpuNodePublic)])
        views = [g for g in listed if isinstance(g, GpuPublic)]
        labels = ["gpu", "uuid"]

        def family(name: str, text: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"gpuq_gpu_memory_{name}_bytes", text, labels=labels)

        total = family("total", "GPU memory in all.")
        used = family("used", "GPU memory in use (NVML; declared caps on simulated GPUs).")
        allocated = family("allocated", "GPU memory given to gpuq jobs (caps; whole GPUs: all).")
        foreign = family("foreign", "GPU memory held by processes gpuq did not start.")
        state = GaugeMetricFamily(
            "gpuq_gpu_state", "1 for the GPU's current state.", labels=[*labels, "state"]
        )
        for g in views:
            key = [str(g.index), g.uuid]
            total.add_metric(key, g.memory_total_mb * MIB)
            used.add_metric(key, g.memory_used_mb * MIB)
            allocated.add_metric(
                key,
                sum(
                    g.memory_total_mb if a.memory_mb is None else a.memory_mb for a in g.allocations
                )
                * MIB,
            )
            foreign.add_metric(key, sum(p.memory_mb for p in g.foreign_processes) * MIB)
            for name in ("free", "in_use", "draining", "quarantined"):
                state.add_metric([*key, name], 1 if g.state == name else 0)
        yield from (total, used, allocated, foreign, state)


def _host(host: HostPublic) -> Iterator[Metric]:
    """The box's cores and host memory: held by jobs, kept by gpuq, free; and each job's."""
    cpus = GaugeMetricFamily("gpuq_host_cpus", "The box's cores, by state.", labels=["state"])
    memory = GaugeMetricFamily(
        "gpuq_host_memory_bytes", "The box's host memory, by state.", labels=["state"]
    )
    for state, cores, mb in (
        ("held", host.cpus_held, host.memory_held_mb),
        ("reserved", host.cpus_reserved, host.memory_reserved_mb),
        ("free", host.cpus_free, host.memory_free_mb),
    ):
        cpus.add_metric([state], cores)
        memory.add_metric([state], mb * MIB)
    job_cpus = GaugeMetricFamily(
        "gpuq_job_cpus", "The cores a running job holds.", labels=["job", "owner"]
    )
    job_memory = GaugeMetricFamily(
        "gpuq_job_host_memory_bytes",
        "The host memory a running job holds.",
        labels=["job", "owner"],
    )
    for job in host.jobs:
        key = [str(job.id), job.owner]
        if job.cpus is not None:
            job_cpus.add_metric(key, job.cpus)
        if job.host_memory_mb is not None:
            job_memory.add_metric(key, job.host_memory_mb * MIB)
    yield from (cpus, memory, job_cpus, job_memory)


def _by_state(counts: Mapping[str, int]) -> Metric:
    by_state = GaugeMetricFamily("gpuq_jobs", "Jobs in each state.", labels=["state"])
    for state in JobStatus:
        by_state.add_metric([state.value], counts.get(state, 0))
    return by_state


def _by_reason(reasons: Sequence[tuple[str | None, int]]) -> Metric:
    by_reason = GaugeMetricFamily(
        "gpuq_jobs_ended", "Jobs that ended, by why (`reason`).", labels=["reason"]
    )
    for reason, count in sorted(reasons):
        by_reason.add_metric([str(reason)], count)
    return by_reason


def _active_jobs(active: Sequence[Job], now: datetime) -> Iterator[Metric]:
    """Each active job's memory, placement, idleness and progress."""
    labels = ["job", "owner"]
    peak = GaugeMetricFamily(
        "gpuq_job_gpu_memory_peak_bytes",
        "Highest GPU memory an active job was seen holding on one GPU (NVML).",
        labels=labels,
    )
    cap = GaugeMetricFamily(
        "gpuq_job_gpu_memory_cap_bytes",
        "An active job's per-GPU memory cap (absent for whole GPUs).",
        labels=labels,
    )
    fraction = GaugeMetricFamily(
        "gpuq_job_progress_ratio", "Share of an active job's training done.", labels=labels
    )
    speed = GaugeMetricFamily(
        "gpuq_job_samples_per_second",
        "An active job's training throughput, all replicas together.",
        labels=labels,
    )
    off_gpu = GaugeMetricFamily(
        "gpuq_job_placement_violations",
        "GPUs an active job was seen using without being given them (NVML).",
        labels=labels,
    )
    idle = GaugeMetricFamily(
        "gpuq_job_idle_seconds",
        "How long an active job has held its GPUs without training (the idle rule).",
        labels=labels,
    )
    for job in active:
        key = [str(job.id), job.owner]
        if job.idle_since is not None:
            idle.add_metric(key, max(0.0, (now - job.idle_since).total_seconds()))
        if job.gpu_memory_peak_mb is not None:
            peak.add_metric(key, job.gpu_memory_peak_mb * MIB)
        if job.memory_mb is not None and job.gpu_count:
            cap.add_metric(key, job.memory_mb * MIB)
        if job.placement_violations:
            off_gpu.add_metric(key, len(job.placement_violations))
        progress = readable_progress(job.progress)
        if progress.fraction is not None:
            fraction.add_metric(key, progress.fraction)
        if progress.samples_per_s is not None:
            speed.add_metric(key, progress.samples_per_s)
    yield from (peak, cap, off_gpu, idle, fraction, speed)


def _gpu_seconds(ended: dict[str, float], active: Sequence[Job], now: datetime) -> Metric:
    """Each owner's GPU-seconds: every ended attempt's (the `usage_total` rollup), and the
    running ones' so far."""
    used = dict(ended)
    for job in active:
        if job.started_at is not None and job.gpu_count:
            held = max(0.0, (now - job.started_at).total_seconds())
            used[job.owner] = used.get(job.owner, 0.0) + job.gpu_count * held
    counter = CounterMetricFamily(
        "gpuq_gpu_seconds",
        "GPUs held times seconds held, per owner: attempts that ended and jobs running now.",
        labels=["owner"],
    )
    for owner, seconds in sorted(used.items()):
        counter.add_metric([owner], seconds)
    return counter


def _nodes(nodes: list[GpuNodePublic]) -> Iterator[Metric]:
    """Under `GPUQ_EXECUTOR=slurm`: the partition's GPU nodes."""
    if not nodes:
        return
    gpus = GaugeMetricFamily("gpuq_node_gpus", "GPUs of a Slurm node.", labels=["node", "state"])
    allocated = GaugeMetricFamily(
        "gpuq_node_gpus_allocated", "GPUs Slurm has given to jobs.", labels=["node", "state"]
    )
    for node in nodes:
        gpus.add_metric([node.node, node.state], node.gpus)
        allocated.add_metric([node.node, node.state], node.gpus_allocated)
    yield from (gpus, allocated)


def render(service: Service) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuqCollector(service))
    return generate_latest(registry)
