"""What the API says of the box's cores and host memory (`GET /v1/host`): its size, gpuq's
reserve, and what the running jobs hold, as the database says."""

from sqlmodel import col, select

from gpuq.contract.states import ACTIVE
from service.errors import Conflict
from service.host import HostSize
from service.public import HostJobPublic, HostPublic
from service.store.db import Database
from service.store.tables import Job


def describe_host(db: Database, size: HostSize, on_a_cluster: bool) -> HostPublic:
    """The box and what its running jobs hold; 409 where a cluster's nodes run the jobs
    (Slurm counts their cores and memory)."""
    if on_a_cluster:
        raise Conflict("jobs run on the cluster's nodes: Slurm holds their cores and memory")
    with db.read() as session:
        rows = session.exec(
            select(Job.id, Job.owner, Job.cpus, Job.host_memory_mb)
            .where(col(Job.status).in_(ACTIVE))
            .order_by(col(Job.id))
        ).all()
    jobs = [
        HostJobPublic(id=i, owner=owner, cpus=cpus, host_memory_mb=mb)
        for i, owner, cpus, mb in rows
        if cpus is not None or mb is not None
    ]
    cpus_held = round(sum(j.cpus or 0.0 for j in jobs), 2)
    memory_held = sum(j.host_memory_mb or 0 for j in jobs)
    return HostPublic(
        cpus_total=size.total_cpus,
        cpus_reserved=round(size.total_cpus - size.cpus, 2),
        cpus_held=cpus_held,
        cpus_free=max(0.0, round(size.cpus - cpus_held, 2)),
        memory_total_mb=size.total_memory_mb,
        memory_reserved_mb=size.total_memory_mb - size.memory_mb,
        memory_held_mb=memory_held,
        memory_free_mb=max(0, size.memory_mb - memory_held),
        jobs=jobs,
    )
