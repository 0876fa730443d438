"""Storing new jobs: a batch of submissions in one write transaction, each judged on its
own and in order (idempotency key, dependencies, quota: `batch_fates`) as if stored alone,
then the inserts and their audit entries (`batch_inserts`). `group_commit.Submissions`
batches concurrent clients'."""

from collections.abc import Sequence

from sqlalchemy import Connection

from service.errors import GpuqError
from service.jobs.batch_facts import read_facts
from service.jobs.batch_fates import Create, Replay, ReplayOf, decide_fates
from service.jobs.batch_inserts import insert_jobs
from service.jobs.submission import Stored, Submission


def store(conn: Connection, batch: Sequence[Submission]) -> list[Stored | GpuqError]:
    """Stores what may be stored of `batch` in the caller's write transaction; one answer
    per submission, in order: its job, or its own error."""
    facts = read_facts(conn, batch)
    fates = decide_fates(batch, facts)
    creating = [i for i, fate in enumerate(fates) if isinstance(fate, Create)]
    rows = insert_jobs(conn, [batch[i] for i in creating], facts.webhooks)
    created = dict(zip(creating, rows, strict=True))
    answers: list[Stored | GpuqError] = []
    for index, fate in enumerate(fates):
        match fate:
            case Create():
                answers.append(Stored(created[index], created=True))
            case Replay(row):
                answers.append(Stored(row, created=False))
            case ReplayOf(original):
                answers.append(Stored(created[original], created=False))
            case GpuqError():
                answers.append(fate)
    return answers
