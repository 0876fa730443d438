"""Whose GPU memory is whose: attributing NVML's per-process readings to jobs."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuq.contract.processes import process_session
from service.gpus.nvml import DeviceReading


@dataclass(frozen=True)
class Usage:
    """One job's memory on one GPU, and the processes holding it."""

    job_id: int
    gpu_index: int
    memory_mb: int
    pids: tuple[int, ...]


def usage_by_job(readings: Iterable[DeviceReading], sessions: Mapping[int, int]) -> list[Usage]:
    """Sums each job's processes per GPU; `sessions` maps a runner's session to its job.

    Every process a job starts stays in its runner's session (a shell's jobs and a
    script's own process groups too), so they all count against the job.
    """
    totals: dict[tuple[int, int], tuple[int, list[int]]] = {}
    for reading in readings:
        for process in reading.processes:
            job_id = sessions.get(process_session(process.pid) or -1)
            if job_id is None:
                continue
            memory, pids = totals.get((job_id, reading.index), (0, []))
            totals[(job_id, reading.index)] = (memory + process.memory_mb, [*pids, process.pid])
    return [
        Usage(job_id, gpu, memory, tuple(pids)) for (job_id, gpu), (memory, pids) in totals.items()
    ]


def worst_overrun(usages: Iterable[Usage], cap_mb: int | None) -> Usage | None:
    """The GPU on which a job is furthest over its per-GPU cap, if any."""
    if cap_mb is None:
        return None
    over = [u for u in usages if u.memory_mb > cap_mb]
    return max(over, key=lambda u: u.memory_mb, default=None)


@dataclass(frozen=True)
class DrainCheck:
    done: bool
    leftover_pids: tuple[int, ...]
    leftover_mb: int
    unaccounted_mb: int


def check_drained(
    reading: DeviceReading, sid: int | None, known_pids: Iterable[int], slack_mb: int
) -> DrainCheck:
    """Whether a finished job has let go of a GPU: none of its processes is left on it, and
    no more than `slack_mb` of used memory is unaccounted for by any listed process."""
    known = set(known_pids)
    left = [
        p
        for p in reading.processes
        if p.pid in known or (sid is not None and process_session(p.pid) == sid)
    ]
    unaccounted = max(0, reading.memory_used_mb - sum(p.memory_mb for p in reading.processes))
    return DrainCheck(
        done=not left and unaccounted <= slack_mb,
        leftover_pids=tuple(p.pid for p in left),
        leftover_mb=sum(p.memory_mb for p in left),
        unaccounted_mb=unaccounted,
    )
