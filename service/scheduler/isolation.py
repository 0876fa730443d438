"""One job never stops the others: the steps that loop over jobs do each job's part apart,
so what fails for one job (its data, most likely: a job writes its own run directory) is
logged for that job and the others go on, in this step and the next."""

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar

from sqlmodel import Session

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


@contextmanager
def apart(job_id: int, doing: str) -> Iterator[None]:
    """Logs what the block raises as job `job_id`'s (`doing`: what it did for the job) and
    goes on; for a block whose writes are transactions of their own."""
    try:
        yield
    except Exception:
        log.exception("job %d: could not %s; the other jobs go on", job_id, doing)


def each_apart(
    session: Session, jobs: Mapping[int, T], write: Callable[[int, T], R], doing: str
) -> tuple[dict[int, R], list[int]]:
    """`write(job_id, item)` for each of `jobs` in the caller's write transaction: what each
    returned, and the jobs for which it raised, whose writes alone are undone (logged as
    `apart` does). `write` must do nothing but write to `session`: it may run twice.

    All are written in one SAVEPOINT first, since one per job would cost every step two
    more statements a job; only if that fails is each job written in a SAVEPOINT of its own.
    """
    if not jobs:
        return {}, []
    try:
        with session.begin_nested():
            return {job_id: write(job_id, item) for job_id, item in jobs.items()}, []
    except Exception:
        pass  # undone; which job it was is found, and logged, below
    done: dict[int, R] = {}
    for job_id, item in jobs.items():
        with apart(job_id, doing), session.begin_nested():
            done[job_id] = write(job_id, item)
    return done, [job_id for job_id in jobs if job_id not in done]
